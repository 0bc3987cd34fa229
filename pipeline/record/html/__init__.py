"""The audit history as pages people open: one self-contained HTML page beside each markdown record
(`<stem>.html`) and `index.html` over the whole history.

The pages are derived data, like `timeline.md`: they are rendered from the JSON twins (never from
anything the twins do not carry, so no secret such as the HMAC key can reach a page), the index is
updated under the audit lock by every gate (from each record's kept row summary), and
`preflight-status --html [AUDIT_DIR]` renders every page and the index again. Everything a record
holds may come from a user's files, so the templates are Jinja2 with autoescape on, the few values
the page's script reads are embedded as escaped JSON, and a Content-Security-Policy lets only the
page's own inline script and style run.
"""

from pipeline.record.html.write import INDEX, page_path, rebuild_html, write_html

__all__ = ["INDEX", "page_path", "rebuild_html", "write_html"]
