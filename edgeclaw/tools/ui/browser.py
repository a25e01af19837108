"""`browser`: a headless chromium a caller drives (group ui): open a URL, read it, click, type, wait,
screenshot, list and close tabs.

Each caller (its proven identity) gets its own chromium with a throwaway profile, started on its first
call and stopped after `[tools.browser] idle_timeout_s` without one; `max_instances` bounds how many run
at once. Every request a page makes goes through a guarded proxy in the daemon that applies web_fetch's
SSRF rules (`backends.browser.proxy`). Running a page's own JavaScript (`evaluate`) is off unless
`allow_evaluate` is set. docs/browser.md has the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.errors import BackendError, ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.media.files import output_path, save, size_text

if TYPE_CHECKING:
    from edgeclaw.backends.browser.pages import BrowserSession
    from edgeclaw.backends.browser.proxy import GuardedProxy
    from edgeclaw.backends.web.guard import NetworkPolicy
    from edgeclaw.config.tools_schema import BrowserConfig
    from edgeclaw.sandbox.process import ChildProcess
    from edgeclaw.tools.ui.browser_sandbox import BrowserSandbox

log = logging.getLogger("edgeclaw.tools.browser")

ACTIONS = ("open", "read", "click", "type", "wait", "screenshot", "tabs", "close", "evaluate")
SCREENSHOT_DIR = "screenshots"
DOWNLOAD_DIR = "downloads"
TEXT_LIMIT = 20_000
MAX_WAIT_S = 60.0
# How the guarded proxy's refusal page begins (backends.browser.proxy): a navigation it refused.
REFUSAL_PREFIX = "edgeclaw browser proxy:"


@dataclass
class _Instance:
    session: BrowserSession
    proxy: GuardedProxy
    last_used: float
    idle_task: asyncio.Task[None] | None = None


class BrowserTool(Tool):
    name = "browser"
    group = "ui"
    description = (
        "Drive a headless web browser: open a URL (gives a tab id), read it (text and an outline whose "
        "elements have references like e12), click or type into an element by reference, wait for text "
        "or an element, screenshot it into the workspace, list tabs, close a tab or the browser."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "url": {"type": "string", "maxLength": 4096, "description": "open: the page (http or https)."},
            "tab": {"type": "string", "maxLength": 16, "description": "Tab id (default: the newest)."},
            "ref": {
                "type": "string",
                "maxLength": 16,
                "description": "click/type/wait: an element reference (e12).",
            },
            "text": {"type": "string", "maxLength": 10_000, "description": "type: what to type; wait: text."},
            "selector": {"type": "string", "maxLength": 512, "description": "wait: a CSS selector."},
            "timeout_s": {"type": "number", "minimum": 0.1, "maximum": MAX_WAIT_S},
            "path": {"type": "string", "maxLength": 512, "description": "screenshot: workspace .png path."},
            "expression": {"type": "string", "maxLength": 10_000, "description": "evaluate: JavaScript."},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        config: BrowserConfig,
        policy: NetworkPolicy,
        ws: Workspace,
        confinement: BrowserSandbox | None = None,
    ) -> None:
        """`confinement`: the sandbox chromium starts in (default: the built-in sandbox settings)."""
        self.config = config
        self.policy = policy
        self.ws = ws
        self._confinement = confinement
        self._instances: dict[str, _Instance] = {}
        self._lock = asyncio.Lock()
        self._moves: set[asyncio.Task[None]] = set()

    # -- instances ------------------------------------------------------------------------------

    async def _instance(self, ctx: ToolContext, start: bool) -> _Instance | None:
        identity = ctx.identity
        async with self._lock:
            inst = self._instances.get(identity)
            if inst is not None and not inst.session.chromium.running:
                await self._stop(identity)
                inst = None
            if inst is None and start:
                inst = await self._start(identity)
            if inst is not None:
                inst.last_used = time.monotonic()
            return inst

    async def _start(self, identity: str) -> _Instance:
        try:
            from edgeclaw.backends.browser.chromium import Chromium, find_chromium
            from edgeclaw.backends.browser.pages import BrowserSession
            from edgeclaw.backends.browser.proxy import GuardedProxy
        except ModuleNotFoundError as e:
            raise ToolError(f"browser: {e.name} is missing: pip install 'edgeclaw[browser]'") from None

        if len(self._instances) >= self.config.max_instances:
            raise ToolRefused(
                f"refused: {len(self._instances)} browsers are running, the most tools.browser.max_instances "
                "allows; try again when one closes"
            )
        executable = self.config.executable or find_chromium()
        if not executable:
            raise ToolError("browser: chromium is not installed (apt-get install chromium)")
        confinement = self.confinement()
        confined = await confinement.confined(
            self.config
        )  # refuses where the sandbox is required and missing
        proxy = GuardedProxy(self.policy)
        proxy_url = await proxy.start()

        async def spawn(argv: list[str], profile: Path, fds: tuple[int, ...]) -> ChildProcess:
            return await confinement.spawn(self.config, argv, profile, fds, executable)

        try:
            chromium = await Chromium.start(executable, spawn, proxy=proxy_url, confined=confined)
            # chromium may write only in its profile: a download lands there and is moved here.
            downloads = Path(chromium.profile_dir) / DOWNLOAD_DIR
            downloads.mkdir(exist_ok=True)
            session = BrowserSession(chromium, str(downloads), self._deliver)
            await session.setup()
        except BaseException:
            await proxy.aclose()
            raise
        inst = _Instance(session, proxy, time.monotonic())
        self._instances[identity] = inst
        inst.idle_task = asyncio.create_task(self._idle_watch(identity, inst))
        return inst

    def confinement(self) -> BrowserSandbox:
        if self._confinement is None:
            from edgeclaw.tools.ui.browser_sandbox import default_browser_sandbox

            self._confinement = default_browser_sandbox()
        return self._confinement

    def _deliver(self, file: Path, name: str) -> None:
        """A finished download, moved from chromium's profile into the workspace's downloads/."""
        shown = f"{DOWNLOAD_DIR}/{Path(name).name.lstrip('.') or 'download'}"

        def move() -> None:
            try:
                target = self.ws.resolve(shown, for_write=True)
                target.parent.mkdir(parents=True, exist_ok=True)
                save(self.ws, target, file.read_bytes(), shown)
            except (OSError, ToolError) as e:
                log.warning("browser: could not keep the download %s: %s", shown, e)
            finally:
                file.unlink(missing_ok=True)

        task = asyncio.get_running_loop().create_task(asyncio.to_thread(move))
        self._moves.add(task)
        task.add_done_callback(self._moves.discard)

    async def _idle_watch(self, identity: str, inst: _Instance) -> None:
        limit = self.config.idle_timeout_s
        while True:
            await asyncio.sleep(max(0.05, inst.last_used + limit - time.monotonic()))
            if time.monotonic() - inst.last_used >= limit:
                async with self._lock:
                    if self._instances.get(identity) is inst:
                        await self._stop(identity, from_watch=True)
                return

    async def _stop(self, identity: str, from_watch: bool = False) -> None:
        inst = self._instances.pop(identity, None)
        if inst is None:
            return
        if inst.idle_task is not None and not from_watch:
            inst.idle_task.cancel()
        await inst.session.chromium.stop()
        await inst.proxy.aclose()

    def running_for(self, identity: str) -> bool:
        return identity in self._instances

    async def aclose(self) -> None:
        for identity in list(self._instances):
            with contextlib.suppress(Exception):
                await self._stop(identity)

    # -- the call -------------------------------------------------------------------------------

    async def check(self, args: Args, ctx: ToolContext) -> None:
        action = args.get("action")
        if action not in ACTIONS:
            raise ToolError(f"browser: unknown action {action!r} (one of {', '.join(ACTIONS)})")
        if action == "evaluate" and not self.config.allow_evaluate:
            raise ToolRefused(
                "refused: evaluate runs the caller's own JavaScript in the page, which is off; "
                "set tools.browser.allow_evaluate = true to allow it"
            )
        if action == "open" and not args.get("url"):
            raise ToolError("browser: open needs a url")
        if action in ("click", "type") and not args.get("ref"):
            raise ToolError(f"browser: {action} needs a ref (like e12, from read)")
        if action == "wait" and not (args.get("text") or args.get("selector") or args.get("ref")):
            raise ToolError("browser: wait needs text, a selector or a ref (like e12, from read)")
        if action == "wait" and sum(bool(args.get(k)) for k in ("text", "selector", "ref")) > 1:
            raise ToolError("browser: wait takes one of text, selector and ref")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        await self.check(args, ctx)
        action = args["action"]
        try:
            return await self._act(action, args, ctx)
        except (BackendError, ToolError) as e:
            if await self._dropped_for_memory(ctx.identity):
                raise ToolError(
                    f"browser: the browser ran out of its {self.config.memory_mb} MiB and was stopped "
                    "(tools.browser.memory_mb); the next call starts a fresh one"
                ) from None
            if isinstance(e, ToolError):
                raise
            raise ToolError(str(e)) from None

    async def _dropped_for_memory(self, identity: str) -> bool:
        """Whether the caller's chromium was ended by its memory bound; if so it is dropped."""
        async with self._lock:
            inst = self._instances.get(identity)
            if inst is None:
                return False
            chromium = inst.session.chromium
            if chromium.running and not chromium.out_of_memory():
                return False  # an error of the call, not of the browser
            with contextlib.suppress(TimeoutError):
                # The cgroup's kill reaches every process at once; the browser's end follows.
                await asyncio.wait_for(asyncio.shield(chromium.child.proc.wait()), 2)
            if not chromium.out_of_memory():
                return False
            log.warning("browser of %s stopped: out of its %d MiB", identity, self.config.memory_mb)
            await self._stop(identity)
            return True

    async def _act(self, action: str, args: Args, ctx: ToolContext) -> ToolResult:
        if action == "close" and not args.get("tab"):
            async with self._lock:
                running = ctx.identity in self._instances
                await self._stop(ctx.identity)
            return ToolResult(for_llm="Closed the browser" if running else "No browser was running")
        inst = await self._instance(ctx, start=action == "open")
        if inst is None:
            raise ToolError("browser: no browser is running for this caller; open a URL first")
        session = inst.session
        timeout = float(args.get("timeout_s") or self.config.load_timeout_s)
        if action == "open":
            url = args["url"]
            if not url.lower().startswith(("http://", "https://")):
                raise ToolError(f"browser: {url!r} is not an http or https URL")
            try:
                tab = await session.open(url, min(timeout, MAX_WAIT_S * 2))
            except BackendError as e:
                raise ToolError(self._with_refusal(str(e), inst)) from None
            page = await session.read(tab)
            if page["text"].startswith(REFUSAL_PREFIX):
                await session.close_tab(tab)
                raise ToolError(f"browser: {url}: {page['text'][len(REFUSAL_PREFIX) :].strip()}")
            return ToolResult(
                for_llm=f"Opened tab {tab.tab_id}: {page['title']!r} at {page['url']}",
                data={"tab": tab.tab_id, "url": page["url"], "title": page["title"]},
            )
        if action == "tabs":
            tabs = await session.list_tabs()
            lines = [f"{t['tab']}: {t['title']!r} {t['url']}" for t in tabs] or ["no tabs"]
            return ToolResult(for_llm="\n".join(lines), data={"tabs": tabs})
        tab = session.tab(args.get("tab"))
        if action == "close":
            await session.close_tab(tab)
            return ToolResult(for_llm=f"Closed tab {tab.tab_id}", data={"tab": tab.tab_id})
        if action == "read":
            page = await session.read(tab)
            text = page["text"][:TEXT_LIMIT]
            return ToolResult(
                for_llm=f"# {page['title']}\n{page['url']}\n\n{text}\n\n## Elements\n{page['outline']}",
                data={
                    "tab": tab.tab_id,
                    "url": page["url"],
                    "title": page["title"],
                    "text": text,
                    "outline": page["outline"],
                },
            )
        if action == "click":
            await session.click(tab, args["ref"])
            return ToolResult(for_llm=f"Clicked {args['ref']} in tab {tab.tab_id}")
        if action == "type":
            await session.type(tab, args["ref"], args.get("text", ""))
            return ToolResult(for_llm=f"Typed into {args['ref']} in tab {tab.tab_id}")
        if action == "wait":
            await session.wait(
                tab, args.get("text"), args.get("selector"), min(timeout, MAX_WAIT_S), args.get("ref")
            )
            return ToolResult(for_llm=f"Found it in tab {tab.tab_id}")
        if action == "screenshot":
            return await self._screenshot(session, tab, args)
        value = await session.evaluate(tab, args.get("expression", ""))
        return ToolResult(for_llm=f"{value!r}"[:TEXT_LIMIT], data={"value": value})

    async def capture(self, args: Args, ctx: ToolContext) -> ToolResult:
        """A screenshot of a tab of the caller's own browser (`tab`, default the newest) into the
        workspace (`path`): for the screenshot tool. Never starts a browser, never another caller's."""
        try:
            inst = await self._instance(ctx, start=False)
            if inst is None:
                raise ToolError("screenshot: no browser is running for this caller; browser open a URL first")
            return await self._screenshot(inst.session, inst.session.tab(args.get("tab")), args)
        except BackendError as e:
            raise ToolError(f"screenshot: {e}") from None

    def _with_refusal(self, message: str, inst: _Instance) -> str:
        if inst.proxy.refused:
            return f"{message}; {inst.proxy.refused[-1]}"
        return message

    async def _screenshot(self, session: BrowserSession, tab: Any, args: Args) -> ToolResult:
        asked = (
            args.get("path") or f"{SCREENSHOT_DIR}/browser-{tab.tab_id}-{time.strftime('%Y%m%d-%H%M%S')}.png"
        )
        path, shown = output_path(self.ws, asked, "screenshot", "png")
        data = await session.screenshot(tab)
        await asyncio.to_thread(save, self.ws, path, data, shown)
        return ToolResult(
            for_llm=f"Saved tab {tab.tab_id} as {shown} ({size_text(len(data))})",
            data={"path": shown, "media_type": "image/png", "bytes": len(data), "tab": tab.tab_id},
        )


def browser_policy(web: Any) -> NetworkPolicy:
    """Where pages may reach: `[tools.web]`'s ranges, hosts and ports, the same as web_fetch."""
    from edgeclaw.backends.web.guard import NetworkPolicy, parse_networks

    return NetworkPolicy(
        allow_networks=parse_networks(web.allow_networks),
        allow_hosts=tuple(web.allow_hosts),
        ports=frozenset(web.ports),
        max_redirects=web.max_redirects,
    )
