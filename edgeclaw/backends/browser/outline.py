"""The page-side script that reads a page: its text and an outline of what can be acted on.

Each link, button, field and heading gets a reference (`e12`) kept in a page-side table, so a later
click or type names an element the model saw, not a CSS selector it guessed. The table lives in the
page's window under a name a page cannot guess in advance of the read (new per browser instance).
"""

from __future__ import annotations

OUTLINE_JS = r"""
(() => {
  const T = window[%(table)s] = [];
  const lines = [];
  const interesting =
    'a[href],button,input,select,textarea,[role=button],[role=link],h1,h2,h3,h4,[onclick]';
  const label = el => (el.getAttribute('aria-label') || el.innerText || el.value || el.placeholder
                       || el.getAttribute('name') || el.getAttribute('title') || '')
                       .trim().replace(/\s+/g, ' ').slice(0, 120);
  for (const el of document.querySelectorAll(interesting)) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    const tag = el.tagName.toLowerCase();
    let kind = el.getAttribute('role') || ({a: 'link', select: 'select', textarea: 'textbox'}[tag]) || tag;
    if (tag === 'input') {
      kind = (el.type === 'submit' || el.type === 'button') ? 'button' : 'input:' + el.type;
    }
    T.push(el);
    const href = tag === 'a' ? ' -> ' + el.href : '';
    lines.push(`[e${T.length}] ${kind} "${label(el)}"${href}`);
    if (T.length >= %(limit)d) break;
  }
  return {title: document.title, url: location.href, text: (document.body ? document.body.innerText : ''),
          outline: lines.join('\n')};
})()
"""

ELEMENT_JS = r"""
(() => {
  const el = (window[%(table)s] || [])[%(index)d - 1];
  if (!el || !el.isConnected) return null;
  el.scrollIntoView({block: 'center'});
  const r = el.getBoundingClientRect();
  return {x: r.x + r.width / 2, y: r.y + r.height / 2};
})()
"""

FOCUS_JS = r"""
(() => {
  const el = (window[%(table)s] || [])[%(index)d - 1];
  if (!el || !el.isConnected) return false;
  el.focus();
  if ('value' in el) el.value = '';
  return true;
})()
"""

# Whether a referenced element can be acted on now: on the page, with a box, shown, not disabled.
# "gone" when it left the page (a later read gives new references).
READY_JS = r"""
(() => {
  const el = (window[%(table)s] || [])[%(index)d - 1];
  if (!el || !el.isConnected) return 'gone';
  const r = el.getBoundingClientRect();
  const style = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && style.visibility !== 'hidden' && style.display !== 'none'
    && !el.disabled;
})()
"""
