"""Who is calling: the callers this device knows, the signatures checked against their keys, and the
caller's identity, roles and tools profile that follow (docs/security.md).

A caller is who it can prove it is, never what it says. Each caller ([callers.NAME], or one of
[mqtt]'s legacy single keys) has its own secret; a signed message names its key (the `key` user
property beside `hmac`, or the envelope's "key" member) and is that caller's, "mqtt:NAME", once the
MAC checks out with that secret. A signature that names no key is checked against the legacy key
the topic's authority takes (command topics: `hmac_secret_*`; admin: `admin_secret_*`; approvals:
`approver_secret_*`). An unsigned message, where the device takes them, is "mqtt:anonymous" with the
channel's tools (the `remote` profile by default) whatever `sender` it declares: `sender` is a
label, never an identity.

Roles say what a proven caller may do: observe (tools that only observe), operate (tool calls,
chat, cancel of its own calls), approve (approval responses only), admin (the admin topics only).
No two callers may share a secret: either could act as the other.

`Keys.prove` is the one question the channel asks: given a received message and the authority it
claims, the authenticated bytes and who sent them (`Proof`), or a refusal (`WireError`
"bad_signature", or "forbidden" for a caller without the role).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Literal

from edgeclaw.channels.mqtt.inbound import Incoming
from edgeclaw.channels.mqtt.protocol import peek_id
from edgeclaw.config.callers import caller_secret_key, legacy_callers
from edgeclaw.config.schema import CallerConfig, Config, MqttConfig
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.net.signing import Verifier, carries_signature, signing_key_name
from edgeclaw.net.wire import WireError
from edgeclaw.records import dataclass

ANONYMOUS = "mqtt:anonymous"
# What an unsigned caller is, where the device takes unsigned commands (no caller may observe or
# operate): one identity with the channel's tools, `remote` unless [tools.channels.mqtt] says
# otherwise. There is nobody else on the channel then, so that table speaks for the anonymous caller.
ANONYMOUS_PROFILE = ""
ANONYMOUS_ROLES = frozenset({"observe", "operate"})

# What a message may ask for, and so which role its caller needs.
Authority = Literal["command", "admin", "approver"]
ROLE_OF: dict[Authority, str] = {"admin": "admin", "approver": "approve"}
# The legacy key a signature without a key name is checked against, by the topic's authority.
LEGACY_ROLE: dict[Authority, str] = {"command": "operate", "admin": "admin", "approver": "approve"}

HOW_TO_ADMIN = (
    'add a caller with the admin role ([callers.NAME] roles = ["admin"] with secret_env or secret_file) '
    "or set mqtt.admin_secret_env / mqtt.admin_secret_file (or mqtt.admin_unsigned = true where the "
    "broker's ACLs alone protect these topics)"
)


@dataclass(frozen=True, slots=True)
class Caller:
    """One caller the device knows: its key, what it may do, and the tools it may use."""

    name: str
    key: Verifier
    roles: frozenset[str]
    profile: str = ""  # "" = the channel's
    where: str = ""  # the config key that names its secret, for messages
    legacy: bool = False  # one of [mqtt]'s single keys: signatures without a key name are checked against it

    @property
    def identity(self) -> str:
        return f"mqtt:{self.name}"


@dataclass(frozen=True, slots=True)
class Proof:
    """A message whose signature checked out (or that needed none): its bytes and who sent it."""

    body: bytes  # the authenticated request bytes (out of the envelope when it came in one)
    authority: Authority
    signer: Caller | None  # the caller whose key signed it; None: unsigned, the anonymous caller
    roles: frozenset[str] = ANONYMOUS_ROLES
    profile: str = ANONYMOUS_PROFILE

    @property
    def signed(self) -> bool:
        return self.signer is not None

    def caller(self) -> str:
        """The caller's identity: the caller whose key signed it, else anonymous. Never what the
        message declares (its `sender` is a label)."""
        return self.signer.identity if self.signer is not None else ANONYMOUS


def forbidden(caller: str, role: str, what: str, request_id: str | None = None) -> WireError:
    return WireError(
        "forbidden",
        f"{what} needs the {role!r} role; caller {caller} does not have it "
        f"(its roles are set by [callers.NAME] roles)",
        request_id,
    )


class Keys:
    """The callers of one device and their keys (none: nothing is signed, everyone is anonymous)."""

    def __init__(
        self,
        config: MqttConfig,
        *,
        command_secret: str = "",
        approver_secret: str = "",
        admin_secret: str = "",
        callers: Mapping[str, CallerConfig] | None = None,
        caller_secrets: Mapping[str, str] | None = None,
        source: str = "<config>",
    ) -> None:
        self.config = config
        self.source = source
        legacy = {c.secret: c for c in legacy_callers(config)}
        found: list[Caller] = []
        for what, secret, role, name in (
            ("mqtt.hmac", command_secret, "operate", config.hmac_key_name),
            ("mqtt.approver", approver_secret, "approve", config.approver_key_name),
            ("mqtt.admin", admin_secret, "admin", config.admin_key_name),
        ):
            if secret:
                where = legacy[what].config_key if what in legacy else f"{what}_secret_file"
                found.append(Caller(name, Verifier(secret, name), frozenset({role}), "", where, legacy=True))
        secrets = caller_secrets or {}
        for name, table in (callers or {}).items():
            secret = secrets.get(name, "")
            if secret:
                where = f"callers.{name}.secret_{'env' if table.secret_env else 'file'}"
                roles = frozenset(table.roles)
                found.append(Caller(name, Verifier(secret, name), roles, table.profile, where))
        self._check_distinct(found)
        self.callers: dict[str, Caller] = {c.name: c for c in found}

    @classmethod
    def from_config(cls, config: Config, secrets: Mapping[str, str]) -> Keys:
        """The keys of a loaded config, with the secrets resolve_secrets read."""
        return cls(
            config.mqtt,
            command_secret=secrets.get("mqtt.hmac", ""),
            approver_secret=secrets.get("mqtt.approver", ""),
            admin_secret=secrets.get("mqtt.admin", ""),
            callers=config.callers,
            caller_secrets={n: secrets.get(caller_secret_key(n), "") for n in config.callers},
            source=config._source,
        )

    def _check_distinct(self, callers: list[Caller]) -> None:
        """No two callers share a secret (either could act as the other), nor a name."""
        problems: list[ConfigError] = []
        for i, later in enumerate(callers):
            for earlier in callers[:i]:
                if earlier.name == later.name:
                    taken = f"the name {later.name!r} is taken"
                    problems.append(ConfigError(self.source, later.where, taken))
                elif earlier.key.same_secret(later.key):
                    problems.append(
                        ConfigError(
                            self.source,
                            later.where,
                            f"the secret of {later.where} must differ from that of {earlier.where}: every "
                            f"caller needs a secret of its own, or whoever holds one could act as both "
                            f"mqtt:{earlier.name} and mqtt:{later.name}",
                        )
                    )
        if problems:
            raise ConfigErrors(problems)

    # -- who may do what ---------------------------------------------------------------
    def _legacy(self, role: str) -> Caller | None:
        return next((c for c in self.callers.values() if c.legacy and role in c.roles), None)

    def _with_role(self, *roles: str) -> list[Caller]:
        return [c for c in self.callers.values() if c.roles & set(roles)]

    @property
    def command(self) -> Verifier | None:
        """The legacy command key (hmac_secret_*), if set."""
        caller = self._legacy("operate")
        return caller.key if caller is not None else None

    @property
    def approver(self) -> Verifier | None:
        """A key that may approve (None: nobody on MQTT may, and approvals are denied)."""
        approvers = self._with_role("approve")
        return approvers[0].key if approvers else None

    @property
    def admin(self) -> Verifier | None:
        """A key that may administer (None: the admin topics are off unless mqtt.admin_unsigned)."""
        admins = self._with_role("admin")
        return admins[0].key if admins else None

    @property
    def commands_signed(self) -> bool:
        """Whether command topics need a signature: yes as soon as any caller may observe or operate."""
        return bool(self._with_role("observe", "operate"))

    def admin_enabled(self) -> bool:
        return self.admin is not None or self.config.admin_unsigned

    # -- proving ------------------------------------------------------------------------
    def prove(self, msg: Incoming, authority: Authority) -> Proof:
        """The message's bytes and caller once its signature checks out; WireError "bad_signature"
        when it does not, "forbidden" when the caller lacks the role the authority needs (the
        command topics' roles are checked per request, by the reader and the server)."""
        args = (msg.topic, msg.payload, msg.user_properties, msg.response_topic, msg.correlation)
        if not carries_signature(msg.payload, msg.user_properties) and self._takes_unsigned(authority):
            roles = frozenset({"admin"}) if authority == "admin" else ANONYMOUS_ROLES
            return Proof(msg.payload, authority, None, roles, ANONYMOUS_PROFILE)
        named = signing_key_name(msg.payload, msg.user_properties)
        if named is not None:
            signer = self.callers.get(named)
            if signer is None:
                raise WireError(
                    "bad_signature", f"no caller named {named!r} is known here", peek_id(msg.payload)
                )
        else:
            signer = self._legacy(LEGACY_ROLE[authority])
            if signer is None:
                raise self._unnamed_refused(authority, msg)
        try:
            body = signer.key.verify(*args)
        except WireError as e:
            raise self._refused(authority, msg, e.message) from None
        role = ROLE_OF.get(authority)
        if role is not None and role not in signer.roles:
            what = "approval responses" if authority == "approver" else "the admin topics"
            raise forbidden(signer.identity, role, what, peek_id(body))
        return Proof(body, authority, signer, signer.roles, signer.profile)

    def _takes_unsigned(self, authority: Authority) -> bool:
        if authority == "command":
            return not self.commands_signed
        if authority == "admin":
            return self.admin is None and self.config.admin_unsigned
        return False

    def _unnamed_refused(self, authority: Authority, msg: Incoming) -> WireError:
        """A signature naming no key where no legacy key serves the topic."""
        if authority == "command" and not carries_signature(msg.payload, msg.user_properties):
            return WireError(
                "bad_signature",
                "this device requires signed commands: add an 'hmac' user property or send a signed "
                "envelope, naming your key ('key' user property or the envelope's \"key\")",
                peek_id(msg.payload),
            )
        return self._refused(authority, msg, "name the key that signed it ('key' user property or \"key\")")

    def _refused(self, authority: Authority, msg: Incoming, why: str) -> WireError:
        request_id = peek_id(msg.payload)
        if authority == "admin":
            return WireError(
                "bad_signature", f"admin commands must be signed with the admin key: {why}", request_id
            )
        if authority == "approver":
            command = self.command
            if command is not None:
                with contextlib.suppress(WireError):
                    args = (msg.topic, msg.payload, msg.user_properties, msg.response_topic, msg.correlation)
                    if command.signed_body(*args) is not None:
                        return WireError(
                            "bad_signature",
                            "this approval response is signed with the command key; approvals must be "
                            "signed with the approver key (the one who asks may not approve)",
                            request_id,
                        )
            return WireError(
                "bad_signature", f"approval responses must be signed with the approver key: {why}", request_id
            )
        return WireError("bad_signature", why, request_id)
