"""The CUDA builds of the framework environments (deploy/frameworks/NAME-cuda.txt),
which a GPU site installs with [envs] framework_build = "cuda": every pin
resolves against this machine's package indexes, as deploy/envs.sh would
install it, and picks the CUDA build of the framework, not a CPU one.

No services; it needs the package registry. Nothing gigabyte-sized is
downloaded: pip reads each wheel's metadata with HTTP range requests
(--use-feature=fast-deps; the registry offers no PEP 658 metadata files), so
a resolution fetches a few MB where the wheels of one build weigh 1.5-3 GB.
The resolution runs on the interpreter of the tests (the hub's environment),
the same Debian Python as the framework environments.
"""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from portal import settings as portal_settings

FRAMEWORKS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "frameworks"
FRAMEWORKS = portal_settings.load()["envs"]["frameworks"]

# Framework environment -> (its framework's distribution in NAME-cuda.txt, a
# requirement of that distribution's metadata that only its CUDA build has).
CUDA_BUILD = {
    "pytorch": ("torch", re.compile(r"^nvidia-cudnn-cu\d+\b")),
    "tensorflow": ("tensorflow", re.compile(r'^nvidia-cudnn-cu\d+\b.*extra == "and-cuda"')),
    "mxnet": ("mxnet-cu117", None),  # the CUDA build is a distribution of its own
}

PIN = re.compile(r"^([A-Za-z0-9._-]+)(\[[A-Za-z0-9_,-]+\])?(===?)([A-Za-z0-9.+!]+)$")


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path):
    """(name, extras, version) of each line of a requirements file, all exact pins."""
    found = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.match(line)
        assert match, f"{path.name}: {line!r} is not an exact pin (NAME==VERSION)"
        found.append((canonical(match[1]), match[2] or "", match[4]))
    return found


def index_url():
    """The index pip uses: PIP_INDEX_URL, pip's configuration, or PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].split()[0]
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".index-url"):
            return value.strip("'\"").split()[0]
    return "https://pypi.org/simple/"


@pytest.fixture(scope="module")
def registry():
    url = index_url().rstrip("/") + "/pip/"
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            response.read(1)
    except (urllib.error.URLError, OSError) as error:
        pytest.skip(f"the package registry cannot be reached ({url}: {error})")
    return url


def resolve(requirements, report, *, deps):
    """pip's dry-run install of a requirements file into nothing; its JSON report."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--no-cache-dir",
        "--quiet",
        "--report",
        str(report),
        "-r",
        str(requirements),
    ]
    if not deps:
        command.append("--no-deps")
    result = subprocess.run(
        [*command[:4], "--use-feature=fast-deps", *command[4:]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0 and "invalid choice: 'fast-deps'" in result.stderr:
        # A pip without the feature: the same resolution, downloading the wheels.
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{requirements.name} does not resolve:\n{result.stderr}"
    return json.loads(report.read_text())["install"]


@pytest.fixture(scope="module")
def resolutions(registry, tmp_path_factory):
    """Every resolution of the tests below, started together the first time
    one is asked for: ``(fw, deps) -> future`` of ``resolve``'s answer. Each
    is mostly waiting for the registry (48 s for PyTorch's whole environment
    alone here); one after the other they took two and a half minutes."""
    folder = tmp_path_factory.mktemp("resolutions")
    with ThreadPoolExecutor(max_workers=2 * len(CUDA_BUILD)) as pool:
        yield {
            (fw, deps): pool.submit(
                resolve,
                FRAMEWORKS_DIR / f"{fw}-cuda.txt",
                folder / f"{fw}-{'deps' if deps else 'pins'}.json",
                deps=deps,
            )
            for fw in sorted(CUDA_BUILD)
            for deps in (False, True)
        }


def test_every_framework_has_a_cuda_build():
    """A CUDA file beside each CPU file, its framework first, then the same
    companions (numpy, tensorboard, matplotlib, ipykernel, ...) at the same pins."""
    for fw in FRAMEWORKS:
        cuda = FRAMEWORKS_DIR / f"{fw}-cuda.txt"
        assert cuda.is_file(), f"{cuda} is missing: framework_build = 'cuda' would fail"
        cpu = pins(FRAMEWORKS_DIR / f"{fw}-cpu.txt")
        assert pins(cuda)[0][0] == CUDA_BUILD[fw][0]
        assert pins(cuda)[1:] == cpu[1:], fw


@pytest.mark.parametrize("fw", sorted(CUDA_BUILD))
def test_each_pin_resolves(fw, resolutions):
    """Each pin alone (--no-deps): that version exists for this Python and Linux,
    and the framework's wheel is the CUDA build."""
    wanted = pins(FRAMEWORKS_DIR / f"{fw}-cuda.txt")
    chosen = {canonical(item["metadata"]["name"]): item for item in resolutions[fw, False].result()}
    for name, _, version in wanted:
        assert name in chosen, f"{fw}: {name} not resolved"
        assert chosen[name]["metadata"]["version"] == version, (name, chosen[name])

    framework, cuda_requirement = CUDA_BUILD[fw]
    item = chosen[framework]
    # Not a local CPU build such as torch 2.13.0+cpu from a find-links folder.
    assert "+" not in item["metadata"]["version"], item["download_info"]["url"]
    assert "cpu" not in item["download_info"]["url"].rsplit("/", 1)[-1]
    if cuda_requirement:
        requires = item["metadata"].get("requires_dist", [])
        assert any(cuda_requirement.search(r) for r in requires), (framework, requires)


@pytest.mark.parametrize("fw", sorted(CUDA_BUILD))
def test_environment_resolves(fw, resolutions):
    """The whole environment with its dependencies: the companions' pins agree
    with the CUDA build's own requirements, and its CUDA libraries come along."""
    requirements = FRAMEWORKS_DIR / f"{fw}-cuda.txt"
    installed = {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in resolutions[fw, True].result()
    }
    for name, _, version in pins(requirements):
        assert installed.get(name) == version, (name, installed.get(name))
    if fw in ("pytorch", "tensorflow"):
        cudnn = [name for name in installed if name.startswith("nvidia-cudnn-cu")]
        assert cudnn, f"{fw}: no cuDNN wheel among {sorted(installed)}"
