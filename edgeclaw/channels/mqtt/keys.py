"""Who is calling: the channel's three keys, the signatures checked against them, and the caller's
identity and authority that follow.

Three keys, each for one authority (docs/mqtt.md): the command key signs commands (`tool/call`,
`tool/cancel`, `chat/in`); the admin key, when there is one, is the only key the admin topics
take (else they take the command key); the approver key alone signs approval responses, so
whoever may send a command cannot approve it. No two of them may be the same secret.

`Keys.prove` is the one question the channel asks: given a received message and the authority
it claims, the authenticated bytes and who sent them (`Proof`), or a refusal (`WireError`
"bad_signature"). A caller's identity is what the channel can prove or was told:
"mqtt:key:NAME" for a message signed with a key, else "mqtt:sender:NAME" for a declared sender,
else "mqtt:anonymous".
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

from edgeclaw.channels.mqtt.inbound import Incoming
from edgeclaw.channels.mqtt.protocol import peek_id
from edgeclaw.config.schema import MqttConfig
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.net.signing import Verifier
from edgeclaw.net.wire import WireError

ANONYMOUS = "mqtt:anonymous"

# What a message may ask for, and so which key must have signed it.
Authority = Literal["command", "admin", "approver"]


@dataclass(frozen=True, slots=True)
class Proof:
    """A message whose signature checked out (or that needed none): its bytes and who sent it."""

    body: bytes  # the authenticated request bytes (out of the envelope when it came in one)
    authority: Authority
    key: Verifier | None  # the key it was checked against; None when this authority takes unsigned ones

    @property
    def signed(self) -> bool:
        return self.key is not None

    def caller(self, sender: str = "") -> str:
        """The caller's identity: the signing key when there is one (a proof), else the declared
        sender (a label), else anonymous."""
        if self.key is not None:  # every message of this authority was checked against it
            return self.key.identity
        if sender:
            return f"mqtt:sender:{sender}"
        return ANONYMOUS


class Keys:
    """The command, admin and approver keys of one device (each optional)."""

    def __init__(
        self,
        config: MqttConfig,
        *,
        command_secret: str = "",
        approver_secret: str = "",
        admin_secret: str = "",
        source: str = "<config>",
    ) -> None:
        self.command = Verifier(command_secret, config.hmac_key_name) if command_secret else None
        # Approval responses are signed with their own key: a command key cannot approve.
        self.approver = Verifier(approver_secret, config.approver_key_name) if approver_secret else None
        if self.command and self.approver and self.command.same_secret(self.approver):
            raise ConfigErrors(
                [
                    ConfigError(
                        source,
                        "mqtt.approver_secret_env"
                        if config.approver_secret_env
                        else "mqtt.approver_secret_file",
                        "the approver key must differ from the command key (hmac_secret_*): "
                        "otherwise whoever may send commands may approve them",
                    )
                ]
            )
        # The admin key, when there is one, is the only key the admin topics take.
        self.admin = Verifier(admin_secret, config.admin_key_name) if admin_secret else None
        if self.admin is not None:
            for other, what in ((self.command, "command key (hmac_secret_*)"),
                                (self.approver, "approver key (approver_secret_*)")):  # fmt: skip
                if other is not None and other.same_secret(self.admin):
                    raise ConfigErrors([ConfigError(
                        source,
                        "mqtt.admin_secret_env" if config.admin_secret_env else "mqtt.admin_secret_file",
                        f"the admin key must differ from the {what}: otherwise whoever holds that "
                        "key could administer the device",
                    )])  # fmt: skip

    def key_for(self, authority: Authority) -> Verifier | None:
        """The key a message of this authority must be signed with (None: none is configured)."""
        if authority == "approver":
            return self.approver
        if authority == "admin" and self.admin is not None:
            return self.admin
        return self.command  # the admin topics take the command key when there is no admin key

    def prove(self, msg: Incoming, authority: Authority) -> Proof:
        """The message's bytes and sender once its signature checks out against the authority's
        key; WireError("bad_signature") when it does not. Approval responses need the approver
        key: without one there is nobody to prove (the caller refuses those before asking)."""
        if authority == "approver":
            return self._prove_approver(msg)
        key = self.key_for(authority)
        if key is None:
            return Proof(msg.payload, authority, None)
        try:
            body = key.verify(
                msg.topic, msg.payload, msg.user_properties, msg.response_topic, msg.correlation
            )
        except WireError as e:
            if key is self.admin:
                raise WireError(
                    e.code, f"admin commands must be signed with the admin key: {e.message}"
                ) from None
            raise
        return Proof(body, authority, key)

    def _prove_approver(self, msg: Incoming) -> Proof:
        approver = self.approver
        assert approver is not None
        args = (msg.topic, msg.payload, msg.user_properties, msg.response_topic, msg.correlation)
        try:
            return Proof(approver.verify(*args), "approver", approver)
        except WireError as e:
            request_id = peek_id(msg.payload)
            command_signed = False
            if self.command is not None:
                with contextlib.suppress(WireError):
                    command_signed = self.command.signed_body(*args) is not None
            if command_signed:
                raise WireError(
                    "bad_signature",
                    "this approval response is signed with the command key; approvals must be signed "
                    "with the approver key (the one who asks may not approve)",
                    request_id,
                ) from None
            raise WireError(
                "bad_signature",
                f"approval responses must be signed with the approver key: {e.message}",
                request_id,
            ) from None
