"""The GPU paths, on a machine with an NVIDIA GPU and PyTorch but no Jupyter.

What the portal's GPU code does there, without Slurm or a hub: the
templates' cells as scripts (the PyTorch template: accuracy and images/sec;
the benchmark template: ResNet-50's FP32 and mixed precision images/sec;
the DDP template's ``train_ddp.py`` as one rank), while the session's NVML
reader (``portal.session.nvml``), a batch job's GPU sampler
(``portal.session.notebook_run.sample_gpus``) and the activity rule
(``portal.session.activity``) watch the job's GPU, as in a session whose
Slurm job holds GPU 0 (``CUDA_VISIBLE_DEVICES=0``, ``SLURM_JOB_GPUS=0``)::

    python3 -m bench.gpu_check --out DIR [--data FOLDER]

It prints what it saw and writes ``DIR/gpu-check.json``; it exits 1 when a
check fails (a template that fails, an NVML reader that reads no GPU, or a
rule that calls the session idle while it trains or busy when it does not).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PARTS = ["pytorch", "benchmark", "ddp"]
JOB_ENV = {"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_GPUS": "0"}


def template_script(notebook, params):
    """A notebook's code cells as one script, ``params`` after its parameters cell."""
    nb = json.loads(Path(notebook).read_text())
    out = ["import matplotlib\nmatplotlib.use('Agg')"]
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        out.append("".join(cell["source"]))
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            out.append("\n".join(f"{k} = {v!r}" for k, v in params.items()))
    return "\n\n".join(out) + "\n"


class Watcher:
    """Samples the reader and the activity rule every ``every`` seconds."""

    def __init__(self, reader, busy_percent, every=0.5):
        self.reader, self.busy_percent, self.every = reader, busy_percent, every
        self.samples, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.phase = "idle"

    def run(self):
        from portal.session.activity import busy_reasons
        from portal.usage import gpu_sample

        while not self.stop.is_set():
            model = self.reader.read()
            utils = [g["utilization"] for g in model["gpus"]]
            self.samples.append(
                {
                    "t": time.time(),
                    "phase": self.phase,
                    "utilization": utils,
                    "memory_used_mb": [g["memory_used_mb"] for g in model["gpus"]],
                    "reasons": busy_reasons([], utils, self.busy_percent),
                    "reason": model["reason"],
                    # the hub's sample of a session's answer (spawners.gpu_use)
                    "hub_sample": gpu_sample(model, self.busy_percent, len(model["gpus"])),
                }
            )
            self.stop.wait(self.every)

    def summary(self, phase):
        mine = [s for s in self.samples if s["phase"] == phase]
        busy = [s for s in mine if s["reasons"]]
        utils = [u for s in mine for u in s["utilization"] if u is not None]
        from portal.usage import slice_advice

        hub = [s["hub_sample"] for s in mine if s.get("hub_sample")]
        held = max((len(s["utilization"]) for s in mine), default=0)
        # what the hub would store of a session running this phase, and say of it
        mean = round(sum(m for _, m in hub) / len(hub), 1) if hub else None
        used = max((b for b, _ in hub), default=None)
        stored = {"gpus": held, "gpu_samples": len(hub), "gpus_used": used, "gpu_busy": mean}
        return {
            "samples": len(mine),
            "busy_by_the_rule": len(busy),
            "hub_record": stored,
            "advice": slice_advice([stored]),
            "mean_utilization": round(sum(utils) / len(utils), 1) if utils else None,
            "max_utilization": max(utils) if utils else None,
            "max_memory_used_mb": max((m for s in mine for m in s["memory_used_mb"]), default=None),
        }


def run_phase(watcher, name, argv, env, log_dir, cwd, timeout=240):
    watcher.phase = name
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    seconds = time.perf_counter() - start
    (log_dir / f"{name}.log").write_text(done.stdout + done.stderr)
    watcher.phase = f"after-{name}"
    print(f"--- {name}: exit {done.returncode} in {seconds:.1f} s")
    print(done.stdout[-1500:])
    if done.returncode:
        print(done.stderr[-3000:])
    return {"exit": done.returncode, "seconds": round(seconds, 1), "stdout": done.stdout[-4000:]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", default="", help="folder of the MNIST-format files")
    parser.add_argument("--idle-seconds", type=float, default=6.0)
    parser.add_argument("--work", type=Path, help="the scripts' folder (default OUT/work)")
    parser.add_argument("--only", nargs="+", default=PARTS, choices=PARTS, help="which parts")
    parser.add_argument("--quick", action="store_true", help="a few steps each (a dry run)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.update(JOB_ENV)
    sys.path.insert(0, str(REPO))

    from portal.contract import SessionEnv
    from portal.session.activity import last_activity
    from portal.session.notebook_run import sample_gpus
    from portal.session.nvml import NVMLReader

    busy_percent = SessionEnv.site_defaults().gpu_busy_percent
    reader = NVMLReader(environ=dict(os.environ))
    report = {
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "busy_percent": busy_percent,
        "first_read": reader.read(),
    }
    print("NVML reader:", json.dumps(report["first_read"]))
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,name,driver_version,pci.bus_id",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
        )
        report["nvidia_smi"] = smi.stdout.strip()

    watcher = Watcher(reader, busy_percent)
    watcher.thread.start()
    stop_sampler = threading.Event()
    sampler_file = args.out / "job.gpus.json"
    sampler = threading.Thread(
        target=sample_gpus,
        args=(sampler_file, stop_sampler),
        kwargs={"read": reader.read, "every": 1.0},
        daemon=True,
    )
    time.sleep(args.idle_seconds)

    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    work = args.work or args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    params = {"data_dir": args.data} if args.data else {}
    phases = {}
    if "pytorch" in args.only:
        sampler.start()
        script = work / "pytorch.py"
        script.write_text(
            template_script(
                REPO / "notebook_templates/pytorch/mnist-pytorch.ipynb",
                {**params, "epochs": 1 if args.quick else 3, "max_steps": 30 if args.quick else 0},
            )
        )
        phases["pytorch"] = run_phase(
            watcher, "pytorch", [sys.executable, script.name], env, args.out, work
        )
        stop_sampler.set()
        sampler.join()
        report["batch_sampler"] = json.loads(sampler_file.read_text())
    time.sleep(args.idle_seconds)

    for batch in (0, 64) if "benchmark" in args.only else ():
        name = f"benchmark-b{batch}" if batch else "benchmark-default"
        script = work / f"{name}.py"
        script.write_text(
            template_script(
                REPO / "notebook_templates/benchmark/resnet50-benchmark.ipynb",
                {
                    "batch_size": batch,
                    "steps": 2 if args.quick else 50,
                    "warmup_steps": 1 if args.quick else 10,
                    "image_size": 64 if args.quick else 224,
                },
            )
        )
        phases[name] = run_phase(watcher, name, [sys.executable, script.name], env, args.out, work)
    time.sleep(args.idle_seconds)

    if "ddp" in args.only:
        ddp = REPO / "notebook_templates/distributed/train_ddp.py"
        ddp_args = [sys.executable, str(ddp), "--epochs", "1", "--log-dir", str(work / "ddp")]
        if args.quick:
            ddp_args += ["--max-steps", "30"]
        if args.data:
            ddp_args += ["--data-dir", args.data]
        phases["ddp"] = run_phase(watcher, "ddp", ddp_args, env, args.out, work)
        time.sleep(args.idle_seconds)
    watcher.stop.set()
    watcher.thread.join()

    report["phases"] = phases
    report["watch"] = {
        p: watcher.summary(p) for p in dict.fromkeys(s["phase"] for s in watcher.samples)
    }
    # the rule over the watch: active while training, its last activity frozen after
    start = datetime.now(UTC)
    previous, verdicts = None, []
    for s in watcher.samples:
        now = datetime.fromtimestamp(s["t"], UTC)
        previous = last_activity(
            now, start.replace(year=2000), [], s["utilization"], busy_percent, previous
        )
        verdicts.append((s["phase"], previous == now))
    report["rule"] = {
        p: {
            "active": sum(v for q, v in verdicts if q == p),
            "samples": sum(1 for q, _ in verdicts if q == p),
        }
        for p in report["watch"]
    }
    for name, phase in phases.items():
        found = re.findall(
            r"^(images/sec[^\n]*|Test Accuracy [^\n]*|Speed-up[^\n]*)$", phase["stdout"], re.M
        )
        report.setdefault("figures", {})[name] = found
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=1))
    print(
        json.dumps(
            {
                k: report.get(k)
                for k in ("watch", "rule", "figures")
                + ("batch_sampler",) * ("batch_sampler" in report)
            },
            indent=1,
        )
    )

    failures = [f"{n} exited {p['exit']}" for n, p in phases.items() if p["exit"]]
    if not report["first_read"]["gpus"]:
        failures.append(f"the NVML reader read no GPU: {report['first_read']['reason']}")
    for name in ("pytorch", "benchmark-default", "ddp"):
        if name.split("-")[0] not in args.only:
            continue
        if report["watch"].get(name, {}).get("busy_by_the_rule", 0) == 0:
            failures.append(f"the rule never saw the GPU busy during {name}")
    if report["watch"].get("idle", {}).get("busy_by_the_rule"):
        failures.append("the rule saw the GPU busy before anything ran")
    print("FAILED: " + "; ".join(failures) if failures else "gpu check: all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
