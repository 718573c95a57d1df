"""bench.gpu_check's template scripts: the notebook's code cells with the
run's parameters after its parameters cell, as papermill places them."""

import json

from bench.gpu_check import REPO, Watcher, template_script

TEMPLATES = REPO / "notebook_templates"


def test_the_parameters_follow_the_parameters_cell_and_the_code_compiles():
    script = template_script(TEMPLATES / "benchmark/resnet50-benchmark.ipynb", {"steps": 2})
    compile(script, "benchmark.py", "exec")
    assert script.index("steps = 50") < script.index("steps = 2") < script.index("import torch")
    assert script.startswith("import matplotlib\nmatplotlib.use('Agg')")


def test_every_code_cell_is_in_the_script_in_order(tmp_path):
    notebook = tmp_path / "n.ipynb"
    cells = [
        {"cell_type": "markdown", "source": ["# title"], "metadata": {}},
        {"cell_type": "code", "source": ["a = 1"], "metadata": {"tags": ["parameters"]}},
        {"cell_type": "code", "source": ["b = a + 1\n", "print(b)"], "metadata": {}},
    ]
    notebook.write_text(json.dumps({"cells": cells}))
    script = template_script(notebook, {"a": "x"})
    assert "# title" not in script
    assert script.endswith("a = 1\n\na = 'x'\n\nb = a + 1\nprint(b)\n")


class Reader:
    """Gives each utilisation once, in its phase, then stops the watch."""

    def __init__(self, watcher_of, script):
        self.watcher_of, self.script = watcher_of, iter(script)

    def read(self):
        watcher = self.watcher_of()
        try:
            watcher.phase, u = next(self.script)
        except StopIteration:
            watcher.stop.set()
            watcher.phase, u = "end", 0
        return {"gpus": [{"utilization": u, "memory_used_mb": 100}], "reason": ""}


def test_the_watch_counts_what_the_rule_calls_busy_in_each_phase():
    script = [("idle", 0), ("idle", 10), ("train", 50), ("train", None), ("train", 11)]
    watcher = None
    watcher = Watcher(Reader(lambda: watcher, script), busy_percent=10, every=0)
    watcher.run()
    assert watcher.summary("idle")["busy_by_the_rule"] == 0
    train = watcher.summary("train")
    assert (train["samples"], train["busy_by_the_rule"], train["mean_utilization"]) == (3, 2, 30.5)
    assert train["hub_record"] == {"gpus": 1, "gpu_samples": 2, "gpus_used": 1, "gpu_busy": 30.5}
    assert train["advice"] == ""  # its one GPU was used
    idle = watcher.summary("idle")
    assert idle["hub_record"]["gpus_used"] == 0
    assert idle["advice"] == ""  # one GPU: it cannot ask for fewer
