"""The browser backend: a headless chromium driven over the Chrome DevTools Protocol.

`cdp` is the protocol client (JSON over chromium's DevTools pipe, on asyncio); `chromium` starts and
stops the browser with its own throwaway profile. Nothing here loads at daemon start: the `browser`
tool imports it on first use.
"""
