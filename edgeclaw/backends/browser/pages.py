"""One caller's browser: its chromium, its tabs, and the actions on them (open, read, click, ...)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

from edgeclaw.backends.browser.chromium import Chromium
from edgeclaw.backends.browser.outline import ELEMENT_JS, FOCUS_JS, OUTLINE_JS, READY_JS
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

OUTLINE_LIMIT = 400
_REF = re.compile(r"^e([1-9][0-9]{0,5})$")


@dataclass
class Tab:
    tab_id: str  # the short id the model sees ("t1")
    target_id: str
    session_id: str
    loaded: asyncio.Event = field(default_factory=asyncio.Event)


def ref_index(ref: str) -> int:
    match = _REF.match(ref.strip().strip("[]"))
    if not match:
        raise BackendError(f"browser: {ref!r} is not an element reference (like e12, from read)")
    return int(match.group(1))


class BrowserSession:
    """The tabs of one chromium; the tool keeps one per caller."""

    def __init__(
        self,
        chromium: Chromium,
        download_dir: str | None = None,
        on_download: Callable[[Path, str], None] | None = None,
    ) -> None:
        """`download_dir`: where chromium saves a download (inside its profile, the only place it may
        write), each under its download id; `on_download(file, suggested name)` takes it from there."""
        self.chromium = chromium
        self.download_dir = download_dir
        self.on_download = on_download
        self._names: dict[str, str] = {}
        self.tabs: dict[str, Tab] = {}
        self._numbers = iter(range(1, 1 << 30))
        self._table = json.dumps("__ec_" + secrets.token_hex(8))
        self.downloads: list[dict[str, Any]] = []
        chromium.cdp.on_event(self._event)

    async def setup(self) -> None:
        if self.download_dir:
            await self.chromium.cdp.send(
                "Browser.setDownloadBehavior",
                {"behavior": "allowAndName", "downloadPath": self.download_dir, "eventsEnabled": True},
            )

    def _event(self, method: str, params: dict[str, Any], session: str | None) -> None:
        if method == "Page.loadEventFired":
            for tab in self.tabs.values():
                if tab.session_id == session:
                    tab.loaded.set()
        elif method == "Browser.downloadWillBegin":
            self._names[params.get("guid", "")] = params.get("suggestedFilename", "")
        elif method == "Browser.downloadProgress" and params.get("state") == "completed":
            self.downloads.append(params)
            guid = params.get("guid", "")
            name = self._names.pop(guid, "")
            if self.download_dir and self.on_download and guid and "/" not in guid:
                self.on_download(Path(self.download_dir) / guid, name or guid)

    def tab(self, tab_id: str | None) -> Tab:
        if not self.tabs:
            raise BackendError("browser: no tab is open; open a URL first")
        if tab_id is None:
            return list(self.tabs.values())[-1]
        if tab_id not in self.tabs:
            raise BackendError(f"browser: no tab {tab_id!r}; open tabs: {', '.join(self.tabs)}")
        return self.tabs[tab_id]

    async def open(self, url: str, within: float) -> Tab:
        cdp = self.chromium.cdp
        target = (await cdp.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        session = (await cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True}))[
            "sessionId"
        ]
        tab = Tab(f"t{next(self._numbers)}", target, session)
        self.tabs[tab.tab_id] = tab
        await cdp.send("Page.enable", session=session)
        await self.navigate(tab, url, within)
        return tab

    async def navigate(self, tab: Tab, url: str, within: float) -> None:
        tab.loaded.clear()
        result = await self.chromium.cdp.send("Page.navigate", {"url": url}, session=tab.session_id)
        if result.get("errorText"):
            raise BackendError(f"browser: loading {url} failed: {result['errorText']}")
        try:
            await asyncio.wait_for(tab.loaded.wait(), within)
        except TimeoutError:
            raise BackendError(
                f"browser: {url} did not finish loading within {within:g} s (tab {tab.tab_id} stays open)"
            ) from None

    async def evaluate(self, tab: Tab, expression: str, within: float = 15.0) -> Any:
        result = await self.chromium.cdp.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=tab.session_id,
            within=within,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text", "error")
            raise BackendError(f"browser: the page's script failed: {text}")
        return result.get("result", {}).get("value")

    async def read(self, tab: Tab) -> dict[str, Any]:
        return await self.evaluate(tab, OUTLINE_JS % {"table": self._table, "limit": OUTLINE_LIMIT})

    async def click(self, tab: Tab, ref: str) -> None:
        point = await self.evaluate(tab, ELEMENT_JS % {"table": self._table, "index": ref_index(ref)})
        if not point:
            raise BackendError(f"browser: {ref} is not on the page any more; read the page again")
        for kind in ("mousePressed", "mouseReleased"):
            await self.chromium.cdp.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": point["x"], "y": point["y"], "button": "left", "clickCount": 1},
                session=tab.session_id,
            )

    async def type(self, tab: Tab, ref: str, text: str) -> None:
        if not await self.evaluate(tab, FOCUS_JS % {"table": self._table, "index": ref_index(ref)}):
            raise BackendError(f"browser: {ref} is not on the page any more; read the page again")
        await self.chromium.cdp.send("Input.insertText", {"text": text}, session=tab.session_id)

    async def wait(
        self, tab: Tab, text: str | None, ref_selector: str | None, within: float, ref: str | None = None
    ) -> None:
        """Until `text` is on the page, an element matches the selector, or the element `ref` (from
        read) can be acted on (shown, not disabled)."""
        if ref:
            probe = READY_JS % {"table": self._table, "index": ref_index(ref)}
        elif text:
            probe = f"document.body && document.body.innerText.includes({json.dumps(text)})"
        else:
            probe = f"!!document.querySelector({json.dumps(ref_selector)})"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline:
            try:
                found = await self.evaluate(tab, probe, within=max(0.5, deadline - loop.time()))
            except BackendError:
                if self.chromium.cdp.closed:
                    raise  # the browser itself went away: nothing more will appear
                found = None
            if found == "gone":
                raise BackendError(f"browser: {ref} is not on the page any more; read the page again")
            if found:
                return
            await asyncio.sleep(0.2)
        what = (
            f"{ref} to be shown and enabled"
            if ref
            else f"text {text!r}"
            if text
            else f"an element matching {ref_selector!r}"
        )
        raise BackendError(f"browser: {what} did not appear in tab {tab.tab_id} within {within:g} s")

    async def screenshot(self, tab: Tab) -> bytes:
        result = await self.chromium.cdp.send(
            "Page.captureScreenshot", {"format": "png"}, session=tab.session_id
        )
        return base64.b64decode(result["data"])

    async def list_tabs(self) -> list[dict[str, str]]:
        infos = {t["targetId"]: t for t in (await self.chromium.cdp.send("Target.getTargets"))["targetInfos"]}
        return [
            {
                "tab": tab.tab_id,
                "url": infos.get(tab.target_id, {}).get("url", ""),
                "title": infos.get(tab.target_id, {}).get("title", ""),
            }
            for tab in self.tabs.values()
        ]

    async def close_tab(self, tab: Tab) -> None:
        await self.chromium.cdp.send("Target.closeTarget", {"targetId": tab.target_id})
        self.tabs.pop(tab.tab_id, None)
