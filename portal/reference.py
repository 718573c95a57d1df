"""The reference pages of the docs site, made from the code they describe:
the configuration from deploy/portal.toml's own keys, values and comments,
the ``portal`` command from its argument parser. Generated at each ``make
docs`` (docs/hooks.py), so they cannot drift from what they describe.

Standard library only.

    python -m portal.reference config     # the configuration page, to stdout
    python -m portal.reference command    # the portal command's page
"""

import argparse
import json
import re
import sys
import tomllib
from dataclasses import dataclass, field

from portal import settings

HEADER = re.compile(r"^\[(\[)?\s*([A-Za-z0-9_.\-]+)\s*\]?\]\s*$")
KEY = re.compile(r"^([A-Za-z0-9_\-]+)\s*=")


@dataclass
class Table:
    """One table of the file: ``[name]``, or ``[[name]]`` (``array``), with the
    comments above its header and between its keys that belong to no key."""

    name: str
    array: bool = False
    text: list = field(default_factory=list)
    keys: dict = field(default_factory=dict)  # key -> its comment's lines


def comment_text(line):
    """A comment line's text, without ``#`` and one space."""
    return line[1:].removeprefix(" ").rstrip()


def read_tables(text):
    """The tables of a TOML file's ``text``, in order, with its comments: a
    comment block right above a key is that key's; one above a header, or
    parted from the next key by a blank line, is its table's. Each
    ``[[name]]`` is read once, its keys the union of its entries'.

    >>> tables = read_tables("# top\\n\\n[a]\\n# x is\\nx = 1\\n\\n[[b]]\\ny = 2\\n")
    >>> [(t.name, t.array, t.text, t.keys) for t in tables]
    [('', False, ['top', ''], {}), ('a', False, [], {'x': ['x is']}), ('b', True, [], {'y': []})]
    """
    tables = {"": Table("")}
    current = tables[""]
    block = []
    depth = 0  # open brackets of a value that spans lines
    for line in text.splitlines():
        if depth:
            depth += open_brackets(line)
            continue
        if line.startswith("#"):
            block.append(comment_text(line))
            continue
        if not line.strip():
            if block:
                current.text.extend([*block, ""])
            block = []
            continue
        header = HEADER.match(line)
        if header:
            name = header.group(2)
            current = tables.setdefault(name, Table(name, array=bool(header.group(1))))
            if block and not current.text:
                current.text.extend([*block, ""])
            block = []
            continue
        key = KEY.match(line)
        if key:
            lines = current.keys.get(key.group(1)) or block
            current.keys[key.group(1)] = lines
            value = line[key.end() :]
            depth = max(0, open_brackets(value))
        block = []
    return [t for t in tables.values() if t.name or t.text]


def open_brackets(text):
    """How many more brackets ``text`` opens than it closes.

    >>> open_brackets('[1, { a = "]" },')
    1
    """
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)  # brackets in strings do not count
    return text.count("[") + text.count("{") - text.count("]") - text.count("}")


def value_of(data, table, key):
    """The default of ``key`` in ``table`` (``"a.b"``; of its first entry
    that has the key, for an array of tables), from the parsed file."""
    node = data
    for part in table.split(".") if table else []:
        node = node[part]
    if isinstance(node, list):
        return next(entry[key] for entry in node if key in entry)
    return node[key]


def toml_value(value):
    """``value`` as TOML writes it, on one line.

    >>> toml_value({"a": [1, True, "x"]})
    '{ a = [1, true, "x"] }'
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return str(value)


def type_name(value):
    """The TOML type of ``value``.

    >>> type_name(1), type_name(1.5), type_name([]), type_name({}), type_name("")
    ('integer', 'float', 'array', 'table', 'string')
    """
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    return names.get(type(value), "table")


def anchor(table, key=""):
    """The id of a table's or a key's heading on the page (``attr_list``).

    >>> anchor("cluster.node_shapes.n1", "gpus")
    'cluster-node_shapes-n1-gpus'
    """
    return "-".join(p for p in (*table.split("."), key) if p)


def key_paths(data, inline=(), prefix=""):
    """Every key of the parsed file as ``table.key`` (``table[].key`` in an
    array of tables), tables included; the keys of the ``inline`` tables
    (``inline_tables``: one value each, their keys free) left out.

    >>> sorted(key_paths({"a": {"b": 1}, "p": [{"n": 1}, {"m": 2}], "i": {"x": 1}}, {"i"}))
    ['a', 'a.b', 'i', 'p', 'p[].m', 'p[].n']
    """
    paths = set()
    for key, value in data.items():
        path = f"{prefix}{key}"
        paths.add(path)
        if isinstance(value, dict) and path not in inline:
            paths |= key_paths(value, inline, f"{path}.")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for entry in value:
                paths |= key_paths(entry, inline, f"{path}[].")
    return paths


def inline_tables(text):
    """The keys of ``text`` whose value is an inline table (``a = { ... }``:
    one value, such as [session] prewarm_imports), as ``table.key``."""
    data = tomllib.loads(text)
    return {
        f"{t.name}.{key}" if t.name else key
        for t in read_tables(text)
        for key in t.keys
        if isinstance(value_of(data, t.name, key), dict)
    }


def config_page(text=None):
    """The configuration reference (Markdown) of deploy/portal.toml's ``text``."""
    if text is None:
        text = settings.DEFAULTS.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    out = [
        "# Configuration reference",
        "",
        "Every key of `deploy/portal.toml`, the defaults a site's",
        "`/etc/portal/portal.toml` (or `$PORTAL_CONFIG`) is merged over: its type,",
        "its default and what the file says of it. A site writes only the keys",
        "it changes. This page is made from the file at each `make docs`.",
        "",
    ]
    tables = read_tables(text)
    intro = tables[0] if tables and not tables[0].name else None
    if intro:
        out += ["```text", *[line for line in intro.text if line], "```", ""]
    for table in tables:
        if not table.name:
            continue
        header = f"[[{table.name}]]" if table.array else f"[{table.name}]"
        out += [f"## `{header}` {{#{anchor(table.name)}}}", ""]
        if table.array:
            out += ["An array of tables: each `" + header + "` adds one entry.", ""]
        out += [*(paragraphs(table.text)), ""] if table.text else []
        for key, lines in table.keys.items():
            value = value_of(data, table.name, key)
            name = f"{table.name}.{key}"
            out += [f"### `{name}` {{#{anchor(table.name, key)}}}", ""]
            shown = toml_value(value)
            label = "Example" if table.array else "Default"
            out += [f"- Type: {type_name(value)}", f"- {label}: `{shown}`", ""]
            out += [*(paragraphs(lines)), ""] if lines else []
    return "\n".join(out).rstrip() + "\n"


def paragraphs(lines):
    """Comment lines as Markdown text: lines indented or starting a list
    kept as written, in a code block when they look like code."""
    out, code = [], False
    for line in lines:
        looks_code = line.startswith("    ") or line.startswith("#")
        if looks_code and not code:
            out += ["", "```text"]
            code = True
        elif not looks_code and code:
            out += ["```", ""]
            code = False
        out.append(line.removeprefix("    ") if code else escape(line))
    if code:
        out.append("```")
    return out


def escape(line):
    """Markdown's own characters in a comment's prose, as text.

    >>> escape("a_b *c* <d>")
    'a\\\\_b \\\\*c\\\\* &lt;d&gt;'
    """
    line = line.replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([_*\[\]])", r"\\\1", line)


def command_page(parser=None):
    """The ``portal`` command's reference (Markdown), from its parser."""
    if parser is None:
        from portal.cli import parser as make_parser

        parser = make_parser()
    out = [
        "# The `portal` command",
        "",
        "The site administrator's command (`portal/cli.py`); the systemd units",
        "run it too. This page is made from its argument parser at each `make docs`.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [f"## `portal {name}` {{#portal-{name}}}", ""]
                out += ["```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv=None):
    which = (argv if argv is not None else sys.argv[1:]) or ["config"]
    page = {"config": config_page, "command": command_page}.get(which[0])
    if page is None:
        sys.exit("usage: python -m portal.reference config|command")
    sys.stdout.write(page())


if __name__ == "__main__":
    main()
