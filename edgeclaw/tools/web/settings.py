"""The web tools' settings per agent: `[tools.web]` with `[tools.agents.ID.web]` over it.

Each web tool asks for the `NetworkPolicy` of the calling agent (`policy_for(ctx)`); http_request
asks for its narrower one (`request_policy_for`), which also holds the agent's `allowed_domains`.
Built once from the config; a bad network or secret name was refused by the loader already and is
refused here too (start-up, not mid-call).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from edgeclaw.backends.web.guard import NetworkPolicy, Resolver, parse_networks, system_resolver
from edgeclaw.config.schema import AgentPolicy, WebConfig
from edgeclaw.records import dataclass
from edgeclaw.tools.base import ToolContext

if TYPE_CHECKING:
    from edgeclaw.backends.web.client import WebRequest, WebResponse


def secret_key(name: str) -> str:
    """Where `config.secrets.resolve_secrets` files the value of [tools.web.secrets.NAME]."""
    return f"tools.web.secrets.{name}"


@dataclass(frozen=True)
class AgentWeb:
    """One agent's web settings, merged."""

    policy: NetworkPolicy  # web_fetch, web_search
    request_policy: NetworkPolicy  # http_request: the same plus allowed_domains
    secret_names: frozenset[str]  # the [tools.web.secrets] this agent's http_request may use


class WebSettings:
    def __init__(
        self,
        web: WebConfig,
        agents: Mapping[str, AgentPolicy],
        secrets: Mapping[str, str],
        *,
        resolver: Resolver = system_resolver,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.web = web
        self._agents = dict(agents)
        self._secrets = {
            name: secrets[secret_key(name)] for name in web.secrets if secret_key(name) in secrets
        }
        # web_search's provider keys, as `config.secrets` filed them ("tools.web.search.brave").
        self.search_keys = {k: v for k, v in secrets.items() if k.startswith("tools.web.search.")}
        self._resolver = resolver
        self._environ = environ
        self._cache: dict[str, AgentWeb] = {}
        self.for_agent("main")
        for agent_id in self._agents:  # every configured agent now, so a bad entry fails at start-up
            self.for_agent(agent_id)

    def for_agent(self, agent_id: str) -> AgentWeb:
        cached = self._cache.get(agent_id)
        if cached is not None:
            return cached
        base = self.web
        agent = self._agents.get(agent_id)
        over = agent.web if agent is not None else None
        key = f"tools.agents.{agent_id}.web" if over is not None else "tools.web"

        def pick(name: str) -> list:
            value = getattr(over, name) if over is not None else None
            return list(value if value is not None else getattr(base, name))

        networks_key = (
            f"{key}.allow_networks" if over is not None and over.allow_networks is not None else None
        )
        policy = NetworkPolicy(
            allow_networks=parse_networks(pick("allow_networks"), networks_key or "tools.web.allow_networks"),
            allow_hosts=tuple(pick("allow_hosts")),
            ports=frozenset(pick("ports")),
            max_redirects=base.max_redirects,
            resolver=self._resolver,
            environ=self._environ,
        )
        names = over.secrets if over is not None and over.secrets is not None else list(base.secrets)
        merged = AgentWeb(
            policy=policy,
            request_policy=replace(policy, allowed_domains=tuple(pick("allowed_domains"))),
            secret_names=frozenset(names),
        )
        self._cache[agent_id] = merged
        return merged

    def policy_for(self, ctx: ToolContext) -> NetworkPolicy:
        return self.for_agent(ctx.agent_id).policy

    def request_policy_for(self, ctx: ToolContext) -> NetworkPolicy:
        return self.for_agent(ctx.agent_id).request_policy

    async def request(
        self, request: WebRequest, ctx: ToolContext, what: str, hint: Callable[[str], str] = str
    ) -> WebResponse:
        """`request` under the calling agent's rules (http_request's and composio's): a refusal of the
        guard is the call's refusal (`hint` adds what to configure), a failure its error, `what` first."""
        from edgeclaw.backends.web.client import fetch
        from edgeclaw.backends.web.guard import WebBlocked, WebError
        from edgeclaw.errors import ToolError, ToolRefused

        try:
            return await fetch(request, self.request_policy_for(ctx))
        except WebBlocked as e:
            raise ToolRefused(hint(str(e))) from None
        except WebError as e:
            raise ToolError(f"{what}: {e}") from None

    def secret(self, name: str, ctx: ToolContext) -> str | None:
        """The value of a named secret for this caller's agent; None when it may not use it."""
        if name not in self.for_agent(ctx.agent_id).secret_names:
            return None
        return self._secrets.get(name)

    def secret_names(self, ctx: ToolContext) -> list[str]:
        return sorted(n for n in self.for_agent(ctx.agent_id).secret_names if n in self._secrets)
