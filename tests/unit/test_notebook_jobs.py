"""Notebooks run as Slurm jobs, without Slurm: what a request may name
(``portal.core.notebooks``), the reader run as the user
(``portal.helper.notebook``), the sanitized rendering of a result
(``portal.service.jobs``), the parsing of sacct and squeue, the sbatch argv
and batch script of a job, and what the user is shown of its state
(``portal.notebookjobs.describe``)."""

import json
import os
import re
import shlex
import subprocess
import threading
from datetime import UTC, datetime, timedelta

import pytest

from portal.core import notebooks
from portal.core.notebooks import (
    MAX_VALUE_CHARS,
    NotebookError,
    Parameter,
    notebook_path,
    parameters_of,
    result_base,
    task_parameters,
    typed,
)
from portal.core.script import render_batch_script
from portal.core.slice import make_slice
from portal.helper import notebook as reader
from portal.notebookjobs import describe
from portal.slurm.commands import sbatch_argv
from portal.slurm.parse import parse_sacct_tasks, parse_squeue_tasks

HOME = "/home/ada"


# -- the notebook's path ----------------------------------------------------


@pytest.mark.parametrize(
    "given, expected",
    [
        ("mnist.ipynb", "mnist.ipynb"),
        ("templates/pytorch/mnist.ipynb", "templates/pytorch/mnist.ipynb"),
        ("./runs//train.ipynb", "runs/train.ipynb"),
        ("  runs/train.ipynb  ", "runs/train.ipynb"),
        ("/home/ada/runs/train.ipynb", "runs/train.ipynb"),
        ("~/runs/train.ipynb", "runs/train.ipynb"),
        ("runs/train.ipynb\n", "runs/train.ipynb"),  # stripped, as spaces are
    ],
)
def test_a_notebook_path_becomes_relative_to_the_home(given, expected):
    assert notebook_path(given, HOME) == expected
    assert notebook_path(given, HOME + "/") == expected


@pytest.mark.parametrize(
    "given, said",
    [
        ("../bob/train.ipynb", "'..'"),
        ("runs/../../bob/train.ipynb", "'..'"),
        ("~/../bob/train.ipynb", "'..'"),
        ("/home/ada/../bob/train.ipynb", "'..'"),
        ("/home/bob/train.ipynb", "not inside your home"),
        ("/home/adam/train.ipynb", "not inside your home"),
        ("/etc/passwd.ipynb", "not inside your home"),
        ("runs/train.py", "not a notebook"),
        ("runs/.ipynb", "not a notebook"),
        ("runs/", "not a notebook"),
        ("/home/ada/", "not a notebook"),
        ("runs/tr\nain.ipynb", "control or format characters"),
        ("runs/tr\x00ain.ipynb", "control or format characters"),
        ("runs/tr\x7fain.ipynb", "control or format characters"),
        ("runs\\train.ipynb", "backslashes"),
        ("a/" * 600 + "x.ipynb", "too long"),
        ("", "give the path"),
        ("   ", "give the path"),
        (None, "give the path"),
        (["x.ipynb"], "give the path"),
    ],
)
def test_a_notebook_path_outside_the_home_or_not_a_notebook_is_refused(given, said):
    with pytest.raises(NotebookError, match=re.escape(said)) as refused:
        notebook_path(given, HOME)
    assert refused.value.field == "notebook"


def test_result_base_is_in_jobs_beside_the_notebook():
    assert result_base("templates/pytorch/mnist.ipynb", "812") == "templates/pytorch/jobs/mnist-812"
    assert result_base("templates/pytorch/mnist.ipynb", "812", 2) == (
        "templates/pytorch/jobs/mnist-812_2"
    )
    assert result_base("run.ipynb", "9", 0) == "jobs/run-9_0"  # task 0 is a task
    assert result_base("run.ipynb", "9") == "jobs/run-9"


# -- the parameters cell ----------------------------------------------------


def declared(source):
    return {p.name: p for p in parameters_of(source)}


def test_parameters_are_typed_from_their_literal_defaults():
    source = "\n".join(
        [
            "epochs = 3  # passes",
            "rate = 0.1",
            "name = 'mnist'",
            "augment = True",
            "layers = [64, 32]",
            "options = {'a': 1}",
            "seed = None",
            "offset = -2",
        ]
    )
    params = parameters_of(source)
    assert [(p.name, p.type, p.default) for p in params] == [
        ("epochs", "int", 3),
        ("rate", "float", 0.1),
        ("name", "str", "mnist"),
        ("augment", "bool", True),
        ("layers", "list", [64, 32]),
        ("options", "dict", {"a": 1}),
        ("seed", "any", None),
        ("offset", "int", -2),
    ]
    assert params[0].to_dict() == {"name": "epochs", "type": "int", "default": 3}


@pytest.mark.parametrize(
    "line", ["steps = 10 * 2", "path = os.environ['HOME']", "size = len('abc')", "s = f'{x}'"]
)
def test_a_default_that_is_no_literal_is_an_expr(line):
    (parameter,) = parameters_of(line)
    assert (parameter.type, parameter.default) == ("expr", None)


def test_an_annotated_assignment_is_a_parameter():
    params = declared("rate: float = 0.5\nepochs: int = 2\ncount: int\n")
    assert {n: (p.type, p.default) for n, p in params.items()} == {
        "rate": ("float", 0.5),
        "epochs": ("int", 2),
    }


def test_only_top_level_single_name_assignments_are_parameters():
    source = "import os\nx, y = 1, 2\na = b = 3\nobj.attr = 4\nif True:\n    inner = 5\nok = 6\n"
    assert list(declared(source)) == ["ok"]


def test_the_later_assignment_of_a_name_wins():
    (parameter,) = parameters_of("epochs = 3\nepochs = 'ten'\n")
    assert (parameter.name, parameter.type, parameter.default) == ("epochs", "str", "ten")


def test_no_source_has_no_parameters():
    assert parameters_of("") == []
    assert parameters_of(None) == []


def test_a_parameters_cell_that_is_not_python_is_refused():
    with pytest.raises(NotebookError, match="not valid Python.*line 2") as refused:
        parameters_of("epochs = 3\nrate = = 0.1\n")
    assert refused.value.field == "notebook"


def test_every_parameter_can_be_sent_as_json():
    (parameter,) = parameters_of("labels = {'cat', 'dog'}")
    assert parameter.type == "expr"
    json.dumps(parameter.to_dict())


# -- a request's parameters and sweep ----------------------------------------

CELL = (
    "epochs = 3\nrate = 0.1\nname = 'a'\naugment = False\nlayers = [1]\nseed = None\nsteps = 2 * 5"
)
DECLARED = parameters_of(CELL)


def test_no_parameters_and_no_sweep_is_one_task_with_the_defaults():
    assert task_parameters(DECLARED, None, None, 8) == [{}]
    assert task_parameters(DECLARED, {}, {}, 8) == [{}]
    assert task_parameters([], None, None, 8) == [{}]


def test_parameters_are_checked_and_typed():
    tasks = task_parameters(
        DECLARED,
        {"epochs": 5, "rate": 1, "name": "b", "augment": True, "layers": [], "seed": "x"},
        None,
        8,
    )
    assert tasks == [
        {"epochs": 5, "rate": 1.0, "name": "b", "augment": True, "layers": [], "seed": "x"}
    ]
    assert isinstance(tasks[0]["rate"], float)


def test_an_unknown_parameter_is_refused_with_the_known_names():
    with pytest.raises(NotebookError, match="'epoch' is not in") as refused:
        task_parameters(DECLARED, {"epoch": 5}, None, 8)
    assert refused.value.field == "parameters"
    assert "epochs, rate, name, augment, layers, seed, steps" in str(refused.value)

    with pytest.raises(NotebookError, match="no parameters cell") as refused:
        task_parameters([], None, {"epochs": [1, 2]}, 8)
    assert refused.value.field == "sweep"


@pytest.mark.parametrize("name", ["1x", "a-b", "", "x" * 65, 3])
def test_a_parameter_name_that_is_no_name_is_refused(name):
    with pytest.raises(NotebookError, match="is not a parameter name") as refused:
        task_parameters(DECLARED, {name: 1}, None, 8)
    assert refused.value.field == "parameters"


@pytest.mark.parametrize(
    "name, value",
    [
        ("epochs", True),  # bool is no int
        ("epochs", 2.5),
        ("epochs", "3"),
        ("rate", False),  # nor a float
        ("rate", "0.1"),
        ("name", 3),
        ("augment", 1),
        ("augment", "true"),
        ("layers", {"a": 1}),
        ("layers", "[1]"),
        ("seed", [1]),
        ("seed", {"a": 1}),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(name, value):
    with pytest.raises(NotebookError, match=f"'{name}' must be") as refused:
        task_parameters(DECLARED, {name: value}, None, 8)
    assert refused.value.field == "parameters"
    with pytest.raises(NotebookError, match=f"'{name}' must be") as refused:
        task_parameters(DECLARED, None, {name: [value]}, 8)
    assert refused.value.field == "sweep"


def test_typed_converts_an_int_to_a_float_for_a_float_parameter():
    rate = Parameter("rate", "float", 0.1)
    value = typed(rate, 2, "parameters.rate")
    assert value == 2.0 and isinstance(value, float)
    epochs = Parameter("epochs", "int", 3)
    assert typed(epochs, 7, "parameters.epochs") == 7
    with pytest.raises(NotebookError) as refused:
        typed(epochs, True, "sweep.epochs")
    assert refused.value.field == "sweep"


def test_a_huge_integer_for_a_float_parameter_is_refused():
    with pytest.raises(NotebookError):
        typed(Parameter("rate", "float", 0.1), 10**400, "parameters.rate")


def test_a_parameter_without_a_literal_default_cannot_be_set():
    with pytest.raises(NotebookError, match="'steps' has no literal default") as refused:
        task_parameters(DECLARED, {"steps": 10}, None, 8)
    assert refused.value.field == "parameters"
    with pytest.raises(NotebookError, match="'steps' has no literal default") as refused:
        task_parameters(DECLARED, None, {"steps": [10, 20]}, 8)
    assert refused.value.field == "sweep"


def test_a_value_longer_than_the_limit_is_refused():
    longest = "x" * (MAX_VALUE_CHARS - 2)  # its JSON: the quotes too
    assert task_parameters(DECLARED, {"name": longest}, None, 8) == [{"name": longest}]
    with pytest.raises(NotebookError, match=f"longer than {MAX_VALUE_CHARS}") as refused:
        task_parameters(DECLARED, {"name": longest + "x"}, None, 8)
    assert refused.value.field == "parameters"
    with pytest.raises(NotebookError, match=f"longer than {MAX_VALUE_CHARS}") as refused:
        task_parameters(DECLARED, None, {"layers": [[0] * MAX_VALUE_CHARS]}, 8)
    assert refused.value.field == "sweep"


def test_a_sweep_is_the_product_of_its_lists_in_order():
    tasks = task_parameters(
        DECLARED, {"name": "fixed"}, {"epochs": [1, 2], "rate": [0.1, 1], "augment": [True]}, 8
    )
    assert tasks == [
        {"name": "fixed", "epochs": 1, "rate": 0.1, "augment": True},
        {"name": "fixed", "epochs": 1, "rate": 1.0, "augment": True},
        {"name": "fixed", "epochs": 2, "rate": 0.1, "augment": True},
        {"name": "fixed", "epochs": 2, "rate": 1.0, "augment": True},
    ]


def test_a_sweep_of_max_array_jobs_is_allowed_and_one_more_is_refused():
    assert len(task_parameters(DECLARED, None, {"epochs": list(range(4))}, 4)) == 4
    assert len(task_parameters(DECLARED, None, {"epochs": [1, 2], "rate": [1, 2]}, 4)) == 4

    with pytest.raises(NotebookError, match="'epochs' has 5 values.*max_array") as refused:
        task_parameters(DECLARED, None, {"epochs": list(range(5))}, 4)
    assert refused.value.field == "sweep"

    with pytest.raises(NotebookError, match="6 combinations.*max_array") as refused:
        task_parameters(DECLARED, None, {"epochs": [1, 2], "rate": [1, 2, 3]}, 4)
    assert refused.value.field == "sweep"


def test_a_name_both_in_parameters_and_sweep_is_refused():
    with pytest.raises(NotebookError, match="'epochs' is also in parameters") as refused:
        task_parameters(DECLARED, {"epochs": 1}, {"epochs": [1, 2]}, 8)
    assert refused.value.field == "sweep"


@pytest.mark.parametrize("values", [[], 3, "1,2", {"a": 1}, None])
def test_a_sweep_value_that_is_no_list_of_values_is_refused(values):
    with pytest.raises(NotebookError, match="'epochs' must be a non-empty list") as refused:
        task_parameters(DECLARED, None, {"epochs": values}, 8)
    assert refused.value.field == "sweep"


@pytest.mark.parametrize(
    "parameters, sweep, field",
    [
        ([["epochs", 1]], None, "parameters"),
        ("epochs=1", None, "parameters"),
        (None, [["epochs", [1]]], "sweep"),
        (None, "epochs", "sweep"),
    ],
)
def test_parameters_and_sweep_must_be_objects(parameters, sweep, field):
    with pytest.raises(NotebookError, match="must be an object") as refused:
        task_parameters(DECLARED, parameters, sweep, 8)
    assert refused.value.field == field


def test_too_many_parameters_are_refused():
    many = parameters_of("\n".join(f"p{i} = {i}" for i in range(notebooks.MAX_PARAMETERS + 1)))
    values = {p.name: 1 for p in many}
    with pytest.raises(NotebookError, match="at most") as refused:
        task_parameters(many, values, None, 8)
    assert refused.value.field == "parameters"


# -- the reader, run as the user --------------------------------------------


def notebook_json(cells=None, metadata=None, nbformat=4):
    if metadata is None:
        metadata = {
            "kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"},
            "language_info": {"name": "python"},
        }
    return json.dumps(
        {"nbformat": nbformat, "nbformat_minor": 5, "metadata": metadata, "cells": cells or []}
    )


PARAMETERS_CELL = {
    "cell_type": "code",
    "metadata": {"tags": ["parameters"]},
    "source": ["epochs = 3\n", "rate = 0.1\n"],
    "outputs": [],
    "execution_count": None,
}


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return home


def test_home_path_resolves_inside_the_home(home):
    assert reader.home_path(str(home), "runs/train.ipynb") == str(home / "runs" / "train.ipynb")


def test_home_path_follows_a_link_that_stays_in_the_home(home):
    (home / "real").mkdir()
    (home / "real" / "train.ipynb").write_text("{}")
    (home / "linked").symlink_to(home / "real")
    assert reader.home_path(str(home), "linked/train.ipynb") == str(home / "real" / "train.ipynb")


def test_home_path_refuses_a_link_that_leads_out(home):
    secret = home.parent / "outside" / "secret.ipynb"
    secret.write_text("{}")
    (home / "runs" / "train.ipynb").symlink_to(secret)
    (home / "out").symlink_to(home.parent / "outside")
    for path in ("runs/train.ipynb", "out/secret.ipynb"):
        with pytest.raises(reader.Refused, match="leads outside your home"):
            reader.home_path(str(home), path)


@pytest.mark.parametrize(
    "path, said",
    [
        ("../outside/secret.ipynb", "'..'"),
        ("runs/../../outside/secret.ipynb", "'..'"),
        ("/etc/passwd", "relative to your home"),
        ("", "relative to your home"),
        ("a\x00.ipynb", "relative to your home"),
        ("a/" * 600 + "x.ipynb", "relative to your home"),
    ],
)
def test_home_path_refuses_dot_dot_and_absolute_paths(home, path, said):
    with pytest.raises(reader.Refused, match=re.escape(said)):
        reader.home_path(str(home), path)


def test_open_file_refuses_a_fifo_without_blocking(home):
    fifo = home / "runs" / "train.ipynb"
    os.mkfifo(fifo)
    result = {}

    def attempt():
        try:
            reader.open_file(str(fifo), ".ipynb", 1024)
        except reader.Refused as e:
            result["refused"] = str(e)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive(), "opening a FIFO blocked"
    assert result == {"refused": "train.ipynb is not a regular file"}


def test_open_file_refuses_a_folder(home):
    (home / "runs" / "folder.ipynb").mkdir()
    with pytest.raises(reader.Refused):
        reader.open_file(str(home / "runs" / "folder.ipynb"), ".ipynb", 1024)


def test_open_file_refuses_another_kind_of_file(home):
    (home / "runs" / "train.log").write_text("x")
    with pytest.raises(reader.Refused, match="train.log is not a .ipynb file"):
        reader.open_file(str(home / "runs" / "train.log"), ".ipynb", 1024)


def test_open_file_refuses_a_missing_file(home):
    with pytest.raises(reader.Refused, match="there is no file gone.ipynb"):
        reader.open_file(str(home / "runs" / "gone.ipynb"), ".ipynb", 1024)


def test_open_file_refuses_a_file_over_the_limit(home, monkeypatch):
    (home / "runs" / "big.ipynb").write_text(notebook_json())
    monkeypatch.setattr(reader, "NOTEBOOK_BYTES", 16)
    with pytest.raises(reader.Refused, match="big.ipynb is larger than"):
        reader.run("read", "runs/big.ipynb", str(home))
    with reader.open_file(str(home / "runs" / "big.ipynb"), ".ipynb", 0) as f:
        assert f.read() == notebook_json().encode()  # 0: no limit (a log's)


def test_notebook_facts_gives_the_kernel_and_the_parameters_cell():
    data = notebook_json(
        [{"cell_type": "markdown", "metadata": {"tags": ["parameters"]}, "source": "no"},
         {"cell_type": "code", "metadata": {}, "source": "import os", "outputs": []},
         PARAMETERS_CELL,
         {**PARAMETERS_CELL, "source": "second = 1"}]
    )  # fmt: skip
    assert reader.notebook_facts(data, "runs/train.ipynb") == {
        "path": "runs/train.ipynb",
        "kernel": "python3",
        "language": "python",
        "parameters": "epochs = 3\nrate = 0.1\n",
    }


def test_notebook_facts_without_a_parameters_cell_or_kernelspec():
    cell = {"cell_type": "code", "metadata": {"tags": "parameters"}, "source": "x = 1"}
    data = notebook_json([cell], metadata={"language_info": {"name": "R"}})
    assert reader.notebook_facts(data, "a.ipynb") == {
        "path": "a.ipynb",
        "kernel": "",
        "language": "R",
        "parameters": None,
    }


@pytest.mark.parametrize(
    "data, said",
    [
        ("not json", "not JSON"),
        ("[" * 100000, "not JSON"),
        ("[]", "no cells"),
        ('{"nbformat": 4}', "no cells"),
        ('{"nbformat": 4, "cells": {}}', "no cells"),
        (notebook_json(nbformat=3), "not a version 4 notebook"),
    ],
)
def test_notebook_facts_refuses_what_is_no_notebook(data, said):
    with pytest.raises(reader.Refused, match=said):
        reader.notebook_facts(data, "a.ipynb")


def test_notebook_facts_takes_a_cell_with_metadata_that_is_no_object_as_untagged():
    data = notebook_json([{"cell_type": "code", "metadata": ["tags"], "source": ""}])
    assert reader.notebook_facts(data, "a.ipynb")["parameters"] is None


def test_run_inspect_and_read(home):
    text = notebook_json([PARAMETERS_CELL])
    (home / "runs" / "train.ipynb").write_text(text)
    facts = json.loads(reader.run("inspect", "runs/train.ipynb", str(home)))
    assert facts["kernel"] == "python3"
    assert facts["parameters"] == "epochs = 3\nrate = 0.1\n"
    assert reader.run("read", "runs/train.ipynb", str(home)) == text.encode()
    with pytest.raises(reader.Refused, match="not a .log file"):
        reader.run("log", "runs/train.ipynb", str(home))


def test_run_log_gives_only_the_end_of_a_long_log(home):
    data = b"".join(b"line %06d\n" % i for i in range(20000))
    assert len(data) > reader.LOG_BYTES
    (home / "runs" / "train-9.log").write_bytes(data)
    assert reader.run("log", "runs/train-9.log", str(home)) == data[-reader.LOG_BYTES :]
    (home / "runs" / "short.log").write_bytes(b"portal: done\n")
    assert reader.run("log", "runs/short.log", str(home)) == b"portal: done\n"
    with pytest.raises(reader.Refused, match="not a .ipynb file"):
        reader.run("read", "runs/short.log", str(home))


@pytest.mark.parametrize(
    "argv", [[], ["inspect"], ["run", "a.ipynb"], ["inspect", "a.ipynb", "b.ipynb"]]
)
def test_main_with_a_bad_command_line_prints_the_usage(argv, capsys):
    assert reader.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"{reader.PREFIX}usage: portal-notebook inspect|read|log|gpus PATH\n"


# -- the rendering of a result -----------------------------------------------


@pytest.mark.parametrize(
    "html, kept, gone",
    [
        ('<a href="javascript:alert(1)">x</a>', "<a>x</a>", "javascript:"),
        ('<a href="JavaScript:alert(1)">x</a>', "<a>x</a>", "alert"),
        ('<a href="https://example.org/">x</a>', '<a href="https://example.org/">x</a>', None),
        (
            '<img src="data:image/png;base64,iVBORw0KGgo=">',
            '<img src="data:image/png;base64,iVBORw0KGgo=">',
            None,
        ),
        ('<img src="https://example.org/track.png">', "<img>", "example.org"),
        ('<img src="data:text/html,x">', "<img>", "data:text"),
        ('<p onclick="steal()" class="c">hi</p>', '<p class="c">hi</p>', "steal"),
        ('<img src="x" onerror="steal()">', "<img>", "steal"),
        ("<script>steal()</script>", "&lt;script&gt;steal()&lt;/script&gt;", "<script"),
        ("<svg onload=steal()></svg>", "&lt;svg onload=steal()&gt;", "<svg"),
        ('<iframe src="https://x/"></iframe>', "&lt;iframe", "<iframe"),
        ("<style>body{display:none}</style>", "&lt;style&gt;", "<style"),
        ("<h2>Results</h2><table><tr><td>1</td></tr></table>", "<h2>Results</h2>", None),
    ],
)
def test_clean_html(html, kept, gone):
    pytest.importorskip("bleach")
    from portal.service.render import clean_html

    cleaned = clean_html(html)
    assert kept in cleaned
    if gone is not None:
        assert gone not in cleaned
    assert clean_html(html.encode()) == cleaned


def test_render_notebook_escapes_scripts_and_handlers():
    pytest.importorskip("nbconvert")
    from portal.service.render import render_notebook

    markdown = (
        "# Results\n\n<script>steal('cookie')</script>\n\n"
        '<img src="x" onerror="steal(2)">\n\n<a href="javascript:steal(3)">link</a>'
    )
    text = notebook_json(
        [{"cell_type": "markdown", "id": "m1", "metadata": {}, "source": markdown}]
    )
    html = render_notebook(text)
    assert re.search(r"<h1[^>]*>Results", html)
    assert "&lt;script&gt;steal('cookie')&lt;/script&gt;" in html
    assert "<script>steal" not in html
    assert not re.search(r"(?i)\sonerror\s*=", html)
    assert "steal(2)" not in html
    assert "javascript:" not in html


# -- sacct and squeue ---------------------------------------------------------


def sacct_line(job_id, state, start="2026-11-27T09:00:01", end="2026-11-27T09:01:01", **kw):
    fields = [
        job_id,
        state,
        kw.get("exit_code", "0:0"),
        "2026-11-27T09:00:00",
        start,
        end,
        kw.get("elapsed", "00:01:00"),
        kw.get("nodes", "n1"),
        kw.get("reason", "None"),
    ]
    return "|".join(fields)


def test_parse_sacct_tasks_of_a_plain_job():
    tasks = parse_sacct_tasks(sacct_line("811", "FAILED", exit_code="1:0"))
    assert list(tasks) == ["811"] and list(tasks["811"]) == [None]
    task = tasks["811"][None]
    assert task["state"] == "FAILED"
    assert task["exit_code"] == "1:0"
    assert task["start"] == datetime(2026, 11, 27, 9, 0, 1)
    assert task["end"] == datetime(2026, 11, 27, 9, 1, 1)
    assert (task["nodes"], task["reason"]) == ("n1", "")


def test_parse_sacct_tasks_of_an_array():
    text = "\n".join(
        [
            sacct_line("812_3", "RUNNING", end="Unknown", nodes="n2"),
            sacct_line("812_4", "CANCELLED by 1000"),
            sacct_line(
                "812_[0-2,5%4]",
                "PENDING",
                start="Unknown",
                end="Unknown",
                nodes="None assigned",
                reason="Priority",
                elapsed="00:00:00",
            ),  # fmt: skip
            "",
            "JobID|State|ExitCode",
            "812.batch|COMPLETED|0:0|x|x|x|x|x|x",
            "812_x|RUNNING|0:0|x|x|x|x|x|x",
            "some warning from sacct",
            sacct_line("813", "COMPLETED"),
        ]
    )
    jobs = parse_sacct_tasks(text)
    assert sorted(jobs) == ["812", "813"]
    tasks = jobs["812"]
    assert sorted(tasks) == [0, 1, 2, 3, 4, 5]
    assert (tasks[3]["state"], tasks[3]["end"], tasks[3]["nodes"]) == ("RUNNING", None, "n2")
    assert tasks[4]["state"] == "CANCELLED"
    for number in (0, 1, 2, 5):
        assert tasks[number]["state"] == "PENDING"
        assert tasks[number]["reason"] == "Priority"
        assert (tasks[number]["start"], tasks[number]["nodes"]) == (None, "")
    tasks[0]["state"] = "changed"
    assert tasks[1]["state"] == "PENDING"  # each task its own dict
    assert list(jobs["813"]) == [None]


def test_parse_sacct_tasks_of_nothing():
    assert parse_sacct_tasks("") == {}
    assert parse_sacct_tasks("sacct: error: something\n") == {}


def test_parse_squeue_tasks():
    text = "\n".join(
        [
            "812_1|PENDING|2026-11-27T10:00:00|N/A|Resources",
            "812_0|RUNNING|2026-11-27T09:00:00|2026-11-27T11:00:00|None",
            "812_[2-3]|PENDING|N/A|N/A|Priority",  # squeue -r lists each; never taken
            "813|RUNNING|2026-11-27T09:00:00|2026-11-27T10:00:00|None",
            "junk",
            "814|RUNNING|x|y",
        ]
    )
    jobs = parse_squeue_tasks(text)
    assert sorted(jobs) == ["812", "813"]
    assert sorted(jobs["812"]) == [0, 1]
    assert jobs["812"][1] == {
        "state": "PENDING",
        "start": datetime(2026, 11, 27, 10, 0),
        "end": None,
        "reason": "Resources",
    }
    assert jobs["812"][0]["end"] == datetime(2026, 11, 27, 11, 0)
    assert jobs["812"][0]["reason"] == ""
    assert list(jobs["813"]) == [None]


# -- sbatch's argv -------------------------------------------------------------

LIMITS = dict(partition="gpu", max_gpus=4, cores_per_gpu=8, mem_per_gpu_gb=48, max_hours=24)


def test_sbatch_argv_of_an_array():
    job_slice = make_slice(1, 2, **LIMITS)
    argv = sbatch_argv(job_slice, job_name="portal-jupyter-notebook", chdir=HOME, array=3)
    assert "--array=0-2" in argv
    assert "--no-requeue" in argv
    assert argv[:2] == ["/usr/bin/sbatch", "--parsable"]
    assert "--job-name=portal-jupyter-notebook" in argv

    plain = sbatch_argv(job_slice, job_name="portal-jupyter-notebook", chdir=HOME)
    assert not any(a.startswith("--array") for a in plain)
    assert "--no-requeue" in plain
    assert [a for a in argv if not a.startswith("--array")] == plain


# -- the batch script ----------------------------------------------------------


def render_job(tmp_path, tasks, **overrides):
    """The script as ``NotebookJobs.script`` renders it."""
    values = dict(
        results=f"{HOME}/runs/jobs",
        stem="train",
        notebook="runs/train.ipynb",
        tasks=tasks,
        environment="/opt/portal/envs/jupyter",
        shared_data="/srv/portal/datasets",
        env={"PORTAL_PROFILE": "pytorch", "PORTAL_NOTEBOOK_JOB": "1"},
        container=[],
        container_env_prefix="",
        image="",
    )
    values.update(overrides)
    return render_batch_script("notebook-job.sh.j2", **values)


def case_block(script):
    lines = script.splitlines()
    first = lines.index('case "${task:-0}" in')
    last = lines.index("esac", first)
    return "\n".join(lines[first : last + 1]) + "\n"


def run_case(block, task, parameters, cwd):
    """Only the script's ``case`` statement, in bash, as task ``task``."""
    code = f"set -eu\nparameters={shlex.quote(str(parameters))}\ntask={shlex.quote(task)}\n"
    return subprocess.run(
        ["bash", "-c", code + block],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=10,
    )


def test_the_job_script_is_valid_shell(tmp_path):
    script = render_job(tmp_path, [{}])
    assert script.startswith("#!/bin/bash\n")
    assert "#SBATCH" not in script
    assert "source /opt/portal/envs/jupyter/bin/activate" in script
    assert "export PORTAL_PROFILE=pytorch" in script
    assert "--notebook runs/train.ipynb" in script
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


def test_the_job_script_has_one_case_branch_per_task_in_order(tmp_path):
    tasks = [{"epochs": e, "rate": r} for e in (1, 2) for r in (0.1, 1.0)]
    script = render_job(tmp_path, tasks)
    branches = [line for line in script.splitlines() if re.match(r"^\d+\) printf ", line)]
    assert [int(line.split(")")[0]) for line in branches] == [0, 1, 2, 3]
    for line, values in zip(branches, tasks, strict=True):
        assert json.loads(shlex.split(line)[3]) == values


def test_a_value_with_shell_syntax_stays_a_value(tmp_path):
    evil = (
        f"'$(touch {tmp_path}/pwned)' \"quoted\" `touch {tmp_path}/pwned2`\n"
        f"line two; touch {tmp_path}/pwned3 ${{HOME}} \\ <x> &"
    )
    tasks = [{"name": evil, "layers": [evil], "epochs": 1}, {"name": "plain"}]
    script = render_job(
        tmp_path,
        tasks,
        results=f"/home/ada/{evil}/jobs",
        stem=evil,
        notebook=f"{evil}.ipynb",
        environment=evil,
        shared_data=evil,
        env={"PORTAL_PROFILE": evil, "PORTAL_NOTEBOOK_JOB": "1"},
    )
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)
    assert f"source {shlex.quote(evil + '/bin/activate')}" in script
    assert f"export PORTAL_PROFILE={shlex.quote(evil)}" in script

    branches = [line for line in script.splitlines() if re.match(r"^\d+\) printf ", line)]
    assert len(branches) == 2  # the value's newline is JSON's \n, not a line of the script
    words = shlex.split(branches[0])
    assert words[:3] == ["0)", "printf", "%s\\n"]
    assert json.loads(words[3]) == tasks[0]

    block = case_block(script)
    for task, values in (("", tasks[0]), ("0", tasks[0]), ("1", tasks[1])):
        out = tmp_path / f"parameters-{task or 'plain'}.json"
        ran = run_case(block, task, out, tmp_path)
        assert ran.returncode == 0, ran.stderr
        assert json.loads(out.read_text()) == values
    assert not list(tmp_path.glob("pwned*"))

    ran = run_case(block, "2", tmp_path / "none.json", tmp_path)
    assert ran.returncode == 1
    assert "portal: no parameters for task 2" in ran.stderr


# -- what the user sees of a job -----------------------------------------------


def record(tasks, sweep=None, job_id="812"):
    return {
        "id": job_id,
        "user": "ada",
        "notebook": "runs/train.ipynb",
        "parameters": {},
        "sweep": sweep or {},
        "tasks": tasks,
    }


def array_of(states):
    """A record of a sweep with one task per state, and sacct's fields of each."""
    tasks = [{"epochs": i} for i in range(len(states))]
    accounted = {i: {"state": s, "exit_code": "0:0"} for i, s in enumerate(states)}
    return record(tasks, {"epochs": list(range(len(states)))}), accounted


@pytest.mark.parametrize(
    "states, overall, ended",
    [
        (["COMPLETED", "COMPLETED", "COMPLETED"], "COMPLETED", True),
        (["RUNNING", "COMPLETED", "PENDING"], "RUNNING", False),
        (["COMPLETED", "PENDING"], "PENDING", False),
        (["RUNNING", "FAILED"], "RUNNING", False),
        (["COMPLETED", "FAILED", "COMPLETED"], "FAILED", True),
        (["COMPLETED", "TIMEOUT", "FAILED"], "FAILED", True),
        (["FAILED", "FAILED"], "FAILED", True),
        (["CANCELLED"], "CANCELLED", True),
    ],
)
def test_the_overall_state_of_an_array(states, overall, ended):
    job, accounted = array_of(states)
    described = describe(job, accounted, {})
    assert [t["state"] for t in described["task_states"]] == states
    assert (described["state"], described["ended"], described["error"]) == (overall, ended, "")


def test_a_job_slurm_could_not_be_asked_about_is_unknown():
    job, _ = array_of(["RUNNING", "RUNNING"])
    described = describe(job, {}, {}, "sacct failed: timeout")
    assert described["state"] == "UNKNOWN"
    assert described["ended"] is False
    assert described["error"] == "sacct failed: timeout"
    assert {t["state"] for t in described["task_states"]} == {"UNKNOWN"}


def test_a_job_sacct_does_not_list_yet_is_submitted():
    described = describe(record([{}]), {}, {})
    assert (described["state"], described["ended"]) == ("SUBMITTED", False)


def test_the_outputs_of_an_array_are_named_per_task():
    job, accounted = array_of(["COMPLETED", "RUNNING"])
    described = describe(job, accounted, {})
    assert [t["task"] for t in described["task_states"]] == [0, 1]
    assert [t["output"] for t in described["task_states"]] == [
        "runs/jobs/train-812_0.ipynb",
        "runs/jobs/train-812_1.ipynb",
    ]
    assert described["task_states"][1]["html"] == "runs/jobs/train-812_1.html"
    assert described["task_states"][1]["log"] == "runs/jobs/train-812_1.log"
    assert described["task_states"][1]["parameters"] == {"epochs": 1}
    assert (described["output"], described["log"]) == (
        "runs/jobs/train-812_0.ipynb",
        "runs/jobs/train-812_0.log",
    )


def test_the_outputs_of_a_plain_job_have_no_task_suffix():
    accounted = {None: {"state": "COMPLETED", "exit_code": "0:0", "elapsed": "00:01:00"}}
    described = describe(record([{"epochs": 5}]), accounted, {})
    (task,) = described["task_states"]
    assert task["task"] is None
    assert (task["output"], task["html"], task["log"]) == (
        "runs/jobs/train-812.ipynb",
        "runs/jobs/train-812.html",
        "runs/jobs/train-812.log",
    )
    assert (task["elapsed"], task["exit_code"]) == ("00:01:00", "0:0")
    assert described["output"] == "runs/jobs/train-812.ipynb"
    assert described["state"] == "COMPLETED"
    assert "seconds_left" not in task


def test_squeue_s_view_is_preferred_to_sacct_s():
    start = datetime.now(UTC) + timedelta(hours=1)
    accounted = {None: {"state": "PENDING", "reason": "Priority"}}
    queued = {None: {"state": "PENDING", "start": start, "end": None, "reason": "Resources"}}
    (task,) = describe(record([{}]), accounted, queued)["task_states"]
    assert task["reason"] == "Resources"
    assert task["start"] == start.isoformat(timespec="seconds")
    assert "seconds_left" not in task


def test_seconds_left_only_for_a_running_task_with_an_end():
    soon = datetime.now(UTC) + timedelta(minutes=10)
    past = datetime.now(UTC) - timedelta(minutes=10)
    job, accounted = array_of(["RUNNING", "RUNNING", "PENDING", "RUNNING", "COMPLETED"])
    accounted[0]["end"] = soon
    accounted[1]["end"] = past
    accounted[2]["end"] = soon
    accounted[4]["end"] = past
    tasks = describe(job, accounted, {})["task_states"]
    assert 590 <= tasks[0]["seconds_left"] <= 600
    assert tasks[0]["end"] == soon.isoformat(timespec="seconds")
    assert tasks[1]["seconds_left"] == 0
    for task in tasks[2:]:
        assert "seconds_left" not in task


# -- what an attacker's review found (each refused, or harmless) ---------------


@pytest.mark.parametrize(
    "path",
    [
        "atk/{name}.ipynb",
        "atk/a}.ipynb",
        "atk/\u202egpj.ipynb",
        "atk/a\u2028b.ipynb",
        "a\u200b.ipynb",
    ],
)
def test_a_path_with_braces_or_format_characters_is_refused(path):
    with pytest.raises(NotebookError, match="control or format characters") as refused:
        notebook_path(path, "/home/bob")
    assert refused.value.field == "notebook"


def test_a_parameters_cell_too_long_to_parse_is_refused_by_the_helper_and_the_check():
    cell = "\n".join(f"a{i} = [1, 2, 3]" for i in range(10000))
    with pytest.raises(NotebookError, match="longer than"):
        parameters_of(cell)
    data = notebook_json([{"cell_type": "code", "metadata": {"tags": ["parameters"]},
                           "source": cell}])  # fmt: skip
    with pytest.raises(reader.Refused, match="longer than"):
        reader.notebook_facts(data, "big.ipynb")


def test_values_nested_too_deep_or_not_numbers_are_refused():
    nested = []
    for _ in range(30):
        nested = [nested]
    with pytest.raises(NotebookError, match="nest deeper"):
        typed(Parameter("lst", "list", []), nested, "parameters.lst")
    for bad in (float("nan"), float("inf"), [1.0, float("-inf")]):
        kind = "list" if isinstance(bad, list) else "float"
        with pytest.raises(NotebookError, match="NaN and Infinity"):
            typed(Parameter("x", kind, 0.1 if kind == "float" else []), bad, "parameters.x")


def test_image_sizes_that_are_not_numbers_are_dropped_before_rendering():
    from portal.service.render import plain_sizes

    nb = {"cells": [{"cell_type": "code", "outputs": [{"metadata": {
        "image/png": {"width": "1 onerror=alert(1)", "height": 40}}}]}]}  # fmt: skip
    meta = plain_sizes(nb)["cells"][0]["outputs"][0]["metadata"]["image/png"]
    assert meta == {"height": 40}


def test_a_rendering_runs_in_a_process_of_its_own_and_refuses_a_huge_notebook():
    pytest.importorskip("nbconvert")
    import asyncio

    from portal.service import render

    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Done"}]
    page = asyncio.run(render.render(notebook_json(cells)))
    assert re.search(r"<h1[^>]*>Done", page)
    with pytest.raises(render.RenderError, match="larger than"):
        asyncio.run(render.render(b" " * (render.MAX_BYTES + 1)))
    with pytest.raises(render.RenderError, match="failed"):
        asyncio.run(render.render("not a notebook"))


def test_a_job_in_a_site_image_runs_papermill_under_the_runtime(tmp_path):
    argv = ["ch-run", "--bind=/home", "--cd=/home/ada", "/var/lib/portal/images/pytorch", "--"]
    script = render_job(tmp_path, [{}], container=argv, image="/var/lib/portal/images/pytorch")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    (line,) = [x for x in script.splitlines() if "notebook_run" in x]
    assert line.startswith("exec ch-run --bind=/home --cd=/home/ada /var/lib/portal/images/pytorch"
                           " -- python -m portal.session.notebook_run")  # fmt: skip
    assert "portal: image /var/lib/portal/images/pytorch (ch-run)" in script


def test_the_gpu_sampler_writes_its_samples_and_the_mean_until_stopped(tmp_path):
    from portal.session.notebook_run import sample_gpus

    stop, path = threading.Event(), tmp_path / "run-1.gpus.json"
    samples = [[80, 40], [100, 100]]

    def read():
        if len(samples) == 1:
            stop.set()  # the second sample is the last
        return {"gpus": [{"index": i, "utilization": u} for i, u in enumerate(samples.pop(0))],
                "reason": ""}  # fmt: skip

    sample_gpus(str(path), stop, read, every=0)
    data = json.loads(path.read_text())
    assert [g["utilization"] for g in data["gpus"]] == [100, 100]
    assert data["mean_utilization"] == 80.0  # (60 + 100) / 2


def test_a_job_without_gpu_data_says_why_never_zero(tmp_path):
    from portal.session.notebook_run import sample_gpus

    stop, path = threading.Event(), tmp_path / "run-2.gpus.json"
    stop.set()
    sample_gpus(str(path), stop, lambda: {"gpus": [], "reason": "No NVIDIA driver on n1"})
    data = json.loads(path.read_text())
    assert data["gpus"] == [] and data["mean_utilization"] is None
    assert data["reason"] == "No NVIDIA driver on n1"
    assert reader.run("gpus", "run-2.gpus.json", str(tmp_path)) == path.read_bytes()


# -- what the pages ask of Slurm (NotebookJobs.with_states, gpu_use) -----------


def job_record(job_id, notebook="a.ipynb"):
    return {"id": job_id, "user": "alice", "notebook": notebook, "sweep": {}, "tasks": [{}],
            "submitted_at": "2026-11-27T10:00:00Z", "profile": "pytorch"}  # fmt: skip


@pytest.fixture
def jobs(monkeypatch):
    """NotebookJobs whose Slurm answers from ``jobs.slurm`` (``{id: state}``),
    counting its queries in ``jobs.asked``."""
    from portal import notebookjobs, settings

    made = notebookjobs.NotebookJobs(store=None, settings=settings.defaults(), profiles=list)
    made.slurm, made.asked = {}, []

    async def notebook_tasks(job_ids, job_name, timeout):
        made.asked.append(sorted(job_ids))
        accounted = {j: {None: {"state": made.slurm[j]}} for j in job_ids if j in made.slurm}
        return accounted, {}

    monkeypatch.setattr(notebookjobs.slurm, "notebook_tasks", notebook_tasks)
    return made


def test_pages_ask_slurm_only_for_jobs_not_seen_lately_and_never_again_for_ended_ones(jobs):
    import asyncio

    jobs.slurm = {"1": "RUNNING", "2": "COMPLETED"}
    first = asyncio.run(jobs.with_states([job_record("1"), job_record("2")]))
    assert [j["state"] for j in first] == ["RUNNING", "COMPLETED"] and jobs.asked == [["1", "2"]]
    first[0]["task_states"][0]["state"] = "changed by a caller"  # the caller's copy alone
    again = asyncio.run(jobs.with_states([job_record("1"), job_record("2"), job_record("3")]))
    assert [j["state"] for j in again] == ["RUNNING", "COMPLETED", "SUBMITTED"]
    assert jobs.asked[-1] == ["3"]  # only the job not seen yet

    jobs.slurm["1"] = "COMPLETED"
    fresh = asyncio.run(jobs.with_states([job_record("1"), job_record("2")], max_age=0))
    assert fresh[0]["state"] == "COMPLETED" and jobs.asked[-1] == ["1", "2"]  # 0: Slurm's now
    jobs.asked.clear()
    asyncio.run(jobs.with_states([job_record("1"), job_record("2")], max_age=0.001))
    assert jobs.asked == []  # both ended: final for the pages


def test_an_array_with_a_suspended_task_is_not_taken_for_ended(jobs, monkeypatch):
    import asyncio

    from portal import notebookjobs

    states = {0: "COMPLETED", 1: "SUSPENDED"}

    async def notebook_tasks(job_ids, job_name, timeout):
        return {"8": {k: {"state": v} for k, v in states.items()}}, {}

    monkeypatch.setattr(notebookjobs.slurm, "notebook_tasks", notebook_tasks)
    array = {**job_record("8"), "sweep": {"lr": [1, 2]}, "tasks": [{"lr": 1}, {"lr": 2}]}
    [job] = asyncio.run(jobs.with_states([array]))
    assert (job["state"], job["ended"]) == ("SUSPENDED", False)
    states[1] = "RUNNING"
    [job] = asyncio.run(jobs.with_states([array], max_age=0))
    assert job["state"] == "RUNNING"


def test_a_view_asked_for_before_a_cancel_is_not_kept(jobs, monkeypatch):
    import asyncio

    from portal import notebookjobs

    jobs.slurm = {"6": "RUNNING"}

    async def slow(job_ids, job_name, timeout):
        seen = {j: {None: {"state": jobs.slurm[j]}} for j in job_ids}
        await asyncio.sleep(0.05)  # the cancel comes meanwhile
        return seen, {}

    async def cancel(user, job_id, job_name, timeout):
        jobs.slurm[job_id] = "CANCELLED"

    monkeypatch.setattr(notebookjobs.slurm, "notebook_tasks", slow)
    monkeypatch.setattr(notebookjobs.slurm, "cancel", cancel)

    async def both():
        listing = asyncio.ensure_future(jobs.with_states([job_record("6")]))
        await asyncio.sleep(0.01)
        await jobs.cancel(job_record("6"))
        assert (await listing)[0]["state"] == "RUNNING"  # Slurm's answer before the cancel
        return await jobs.with_states([job_record("6")])

    assert asyncio.run(both())[0]["state"] == "CANCELLED"


def test_a_cancel_or_a_changed_record_is_asked_again(jobs):
    import asyncio

    from portal import notebookjobs

    async def cancel(user, job_id, job_name, timeout):
        jobs.slurm[job_id] = "CANCELLED"

    jobs.slurm = {"5": "PENDING"}
    asyncio.run(jobs.with_states([job_record("5")]))
    notebookjobs.slurm.cancel, saved = cancel, notebookjobs.slurm.cancel
    try:
        asyncio.run(jobs.cancel(job_record("5")))
    finally:
        notebookjobs.slurm.cancel = saved
    assert asyncio.run(jobs.with_states([job_record("5")]))[0]["state"] == "CANCELLED"
    jobs.slurm["5"] = "RUNNING"  # Slurm reused the number for another record (a purged database)
    assert asyncio.run(jobs.with_states([job_record("5", "b.ipynb")]))[0]["state"] == "RUNNING"


def test_a_failed_query_is_not_kept(jobs, monkeypatch):
    import asyncio

    from portal import notebookjobs
    from portal.slurm.parse import SlurmError

    async def broken(job_ids, job_name, timeout):
        raise SlurmError("slurmdbd is down")

    monkeypatch.setattr(notebookjobs.slurm, "notebook_tasks", broken)
    [job] = asyncio.run(jobs.with_states([job_record("9")]))
    assert job["state"] == "UNKNOWN" and "slurmdbd is down" in job["error"]
    assert "9" not in jobs._seen


def test_a_running_tasks_gpu_sample_is_read_once_while_fresh(jobs):
    import asyncio

    reads = []

    async def read(user, command, path):
        reads.append(path)
        return json.dumps({"gpus": [{"utilization": 50}], "mean_utilization": 50.0})

    jobs.read = read
    jobs.slurm = {"4": "RUNNING"}
    for _ in range(3):
        [job] = asyncio.run(jobs.with_states([job_record("4")]))
        job = asyncio.run(jobs.gpu_use(job))
        assert job["task_states"][0]["gpu_use"]["mean_utilization"] == 50.0
    assert len(reads) == 1


def test_a_rendered_result_has_code_colours_of_aa_contrast():
    """Issue 39: every colour the rendered notebook's code and prompts take
    from JupyterLab's theme keeps 4.5:1 on a code cell's #f5f5f5, the
    portal's darker ones last in the head (they win), prompts opaque."""
    from portal.service.render import render_notebook

    def luminance(colour):
        h = colour.lstrip("#")
        h = "".join(c * 2 for c in h) if len(h) == 3 else h
        rgb = [int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    def contrast(a, b):
        la, lb = sorted((luminance(a), luminance(b)), reverse=True)
        return (la + 0.05) / (lb + 0.05)

    cell = {"cell_type": "code", "source": "x = 1  # one", "metadata": {}, "outputs": [],
            "execution_count": 1}  # fmt: skip
    html = render_notebook(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                       "nbformat_minor": 5}))  # fmt: skip
    head = html[: html.index("</head>")]
    pattern = r"(--jp-(?:mirror-editor-[\w-]+|cell-\w+prompt-font-color)):\s*(#[0-9a-fA-F]{3,6})\b"
    last = dict(re.findall(pattern, head))  # the last definition of each wins
    assert len(last) >= 20
    low = {k: round(contrast(v, "#f5f5f5"), 2) for k, v in last.items()
           if contrast(v, "#f5f5f5") < 4.5}  # fmt: skip
    assert not low, low
    assert re.findall(r"--jp-cell-prompt-not-active-opacity:\s*([\d.]+)", head)[-1] == "1"


@pytest.mark.parametrize(
    "sample, kept",
    [
        ('{"gpus": [{"index": 0, "utilization": 40}], "mean_utilization": 40}', True),
        ('{"gpus": [{"index": 0, "utilization": NaN}]}', False),  # no JSON answer holds NaN
        ("[1, 2]", False),
        ("[" * 100_000 + "]" * 100_000, False),  # deeper than Python reads
        ("not json", False),
    ],
)
def test_a_tasks_gpu_sample_is_shown_only_when_it_is_a_json_object(jobs, sample, kept):
    """The sample is the user's own file: what it holds must not make the job's
    answer fail (an API answer is JSON without NaN: found by fuzzing)."""
    import asyncio

    jobs.slurm = {"5": "RUNNING"}
    job = asyncio.run(jobs.with_states([{**job_record("5"), "tasks": [{"gpus": "g.json"}]}]))[0]

    async def read(user, what, path):
        return sample

    jobs.read = read
    use = asyncio.run(jobs.gpu_use(job))["task_states"][0]["gpu_use"]
    json.dumps(use, allow_nan=False)
    assert (use == json.loads(sample)) if kept else use["reason"].startswith("no sample yet")


def test_cancelling_a_job_slurmctld_has_forgotten_is_no_error(jobs, monkeypatch):
    """An ended job leaves slurmctld's memory after MinJobAge: scancel then
    says "Invalid job id", and the cancel answered 503 (found by fuzzing)."""
    import asyncio

    from portal import notebookjobs
    from portal.slurm.parse import SlurmError

    said = {"text": "scancel: error: Kill job error on job id 853: Invalid job id specified"}

    async def cancel(user, job_id, job_name, timeout):
        raise SlurmError(said["text"])

    monkeypatch.setattr(notebookjobs.slurm, "cancel", cancel)
    asyncio.run(jobs.cancel(job_record("853")))
    said["text"] = "scancel: error: Unable to contact slurm controller"
    with pytest.raises(SlurmError, match="Unable to contact"):
        asyncio.run(jobs.cancel(job_record("853")))
