"""The executed notebook of a job, rendered as HTML, sanitized, in a process
of its own (``render``): the notebook is a user's file, which may be made to
be slow or large to render; the process has a CPU, memory and time limit,
and the service's own loop never waits on it.

``python -m portal.service.render`` reads the notebook's JSON on stdin and
writes the page on stdout.
"""

import asyncio
import resource
import sys

MAX_BYTES = 16 * 2**20  # the largest notebook rendered
CPU_SECONDS, MEMORY_BYTES, TIMEOUT = 60, 2 * 2**30, 90

# What the markdown and HTML of a notebook keep (bleach's allow-list, wider
# than nbconvert's own, which escapes headings and images): no script, no
# event handler, no style, no form, no frame; links to the web only, images
# inline only (data:image/...).
KEPT_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "del", "details", "div", "em", "h1", "h2",
    "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "span",
    "strong", "sub", "summary", "sup", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip


class RenderError(RuntimeError):
    pass


def _kept_attribute(tag, name, value):
    if name in ("class", "id", "title", "alt", "colspan", "rowspan", "align"):
        return True
    if tag == "a" and name == "href":
        return value.startswith(("https://", "http://", "mailto:", "#"))
    return tag == "img" and name == "src" and value.startswith("data:image/")


def clean_html(element):
    """``element`` (HTML of a notebook's user) with only ``KEPT_TAGS`` and
    their harmless attributes; anything else escaped, shown as text."""
    import bleach

    text = element.decode() if isinstance(element, bytes) else str(element)
    return bleach.clean(text, tags=KEPT_TAGS, attributes=_kept_attribute, protocols=(
        "http", "https", "mailto", "data",
    ))  # fmt: skip


def plain_sizes(nb):
    """Outputs' image sizes that are numbers only: nbconvert's template
    writes them into an attribute unquoted (``width=1 onerror=...``)."""
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            for meta in (output.get("metadata") or {}).values():
                if isinstance(meta, dict):
                    for key in ("width", "height"):
                        value = meta.get(key)
                        if key in meta and not (
                            isinstance(value, (int, float)) and not isinstance(value, bool)
                        ):
                            del meta[key]
    return nb


# JupyterLab's light theme, as nbconvert's lab template inlines it, has
# colours under WCAG 2.1 AA's 4.5:1 on a code cell's #f5f5f5 (comments
# #408080 4.17, numbers #080 4.26, operators #a2f 4.40) and prompts at half
# opacity (2.16), and links told from text by colour alone: darker ones,
# each at least 4.6:1 on #f5f5f5, and underlined links (axe-core checks the
# rendered result in tests/browser/test_notebook_jobs.py).
CONTRAST_CSS = """<style>
:root {
  --jp-cell-prompt-not-active-opacity: 1;
  --jp-cell-inprompt-font-color: #1f5f93;
  --jp-cell-outprompt-font-color: #933f25;
  --jp-mirror-editor-atom-color: #3333cc;
  --jp-mirror-editor-number-color: #006600;
  --jp-mirror-editor-variable-3-color: #006644;
  --jp-mirror-editor-operator-color: #8a1ccf;
  --jp-mirror-editor-meta-color: #8a1ccf;
  --jp-mirror-editor-comment-color: #2f6363;
  --jp-mirror-editor-bracket-color: #5e5e44;
  --jp-mirror-editor-quote-color: #006600;
  --jp-mirror-editor-error-color: #c00000;
  --jp-mirror-editor-hr-color: #666666;
}
/* a link in a paragraph is told from its text by more than colour (1.4.1) */
.jp-RenderedHTMLCommon a, p a { text-decoration: underline !important; }
</style>
"""


def render_notebook(text):
    """The notebook JSON ``text`` as HTML, sanitized: nbconvert's
    ``sanitize_html`` (its markdown, HTML and SVG go through ``clean_html``),
    its JavaScript outputs dropped, image sizes numbers only."""
    import nbconvert
    import nbformat

    exporter = nbconvert.HTMLExporter(
        template_name="lab", sanitize_html=True, filters={"clean_html": clean_html}
    )
    body, _ = exporter.from_notebook_node(plain_sizes(nbformat.reads(text, as_version=4)))
    head = body.rfind("</head>")
    return body[:head] + CONTRAST_CSS + body[head:] if head >= 0 else CONTRAST_CSS + body


def _limits():
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


async def render(text):
    """``render_notebook(text)`` in a child process with its limits; RenderError."""
    data = text.encode() if isinstance(text, str) else text
    if len(data) > MAX_BYTES:
        raise RenderError(f"the notebook is larger than {MAX_BYTES // 2**20} MB to show here")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "portal.service.render",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, preexec_fn=_limits,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), TIMEOUT)
    except (TimeoutError, asyncio.CancelledError):
        proc.kill()
        await proc.wait()
        raise RenderError(f"the rendering took more than {TIMEOUT} s") from None
    if proc.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise RenderError(f"the rendering failed ({proc.returncode}): {last[0][:200]}")
    return out.decode()


def main():
    sys.stdout.write(render_notebook(sys.stdin.buffer.read().decode()))


if __name__ == "__main__":
    main()
