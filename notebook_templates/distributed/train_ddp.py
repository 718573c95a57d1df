"""Data-parallel training of a small image classifier on every GPU of a Slurm job.

One process (a *rank*) per GPU, on every node of the job, each with a full
copy of the model: PyTorch's DistributedDataParallel averages the gradients
of all ranks after each step (NCCL between GPUs, Gloo between CPUs), so they
all take the same step on different images. ``mnist-ddp.ipynb`` launches it
with ``srun``; it also runs under ``torchrun``, or alone as a single rank::

    srun python train_ddp.py --epochs 1       # in a job: one rank per task
    torchrun --nproc-per-node 4 train_ddp.py  # one node, without Slurm

Rank 0 prints the progress, the test accuracy after each epoch and the speed,
writes TensorBoard scalars and saves the trained model in ``--log-dir``.

Under ``srun`` the ranks find each other through a file, not a network port:
a ``FileStore`` in ``~/.cache/portal-ddp`` (a folder only its owner may open,
on the home shared by the nodes), which rank 0 removes at the end; nothing
listens on a port that others could guess from the job id. The ranks exchange
tensors of numbers only, never pickled objects (``all_gather_object`` and
the like would run whatever code a peer put in them). Their traffic itself
(Gloo, NCCL) is not authenticated: where users must be isolated from each
other, jobs need nodes of their own or a network of their own.
"""

import argparse
import gzip
import hashlib
import os
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

SEARCH_PATH = [
    "~/shared-data/mnist",
    "~/shared-data/fashion-mnist",
    "/srv/portal/datasets/mnist",
    "/srv/portal/datasets/fashion-mnist",
    "/usr/share/datasets/fashion-mnist",
]
FASHION_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]


# where the ranks of an srun step meet: a file named after the job and step
RENDEZVOUS_DIR = "~/.cache/portal-ddp"
HOST_NAME_MAX = 64  # bytes of a node's name (Linux's limit)
MAX_CORES = 1 << 16  # cores of a node, at most, that the ranks tell each other about


# -- where this process stands -------------------------------------------------


@dataclass(frozen=True)
class Place:
    """This process's rank among all, its rank on its node, and what started
    it: "torchrun", "srun" (``step``: the job and step ids) or "alone"."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str
    step: str = ""


def hostnames(nodelist):
    """Slurm's compact node list (``n[1-2]``) as names, by ``scontrol show hostnames``."""
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def find_place(environ=os.environ):
    """Ranks from torchrun's variables when it started us, else from Slurm's
    (each task of an ``srun`` step is one rank), else a single rank."""
    if "RANK" in environ and "WORLD_SIZE" in environ:  # torchrun, or set by hand
        return Place(
            int(environ["RANK"]),
            int(environ["WORLD_SIZE"]),
            int(environ.get("LOCAL_RANK", 0)),
            "torchrun",
        )
    if "SLURM_STEP_ID" in environ and "SLURM_PROCID" in environ:  # a task of srun
        # a step's id is unique within its job, but a requeued job starts over
        step = f"{environ['SLURM_JOB_ID']}.{environ['SLURM_STEP_ID']}"
        restarts = int(environ.get("SLURM_RESTART_COUNT") or 0)
        return Place(
            int(environ["SLURM_PROCID"]),
            int(environ["SLURM_NTASKS"]),
            int(environ.get("SLURM_LOCALID", 0)),
            "srun",
            f"{step}.{restarts}" if restarts else step,
        )
    return Place(0, 1, 0, "alone")


def private_folder(path):
    """``path`` as a folder that only this user may open, made (mode 700) if
    missing; refuses one that is a link, another user's, or open to others."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        problem = "a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "not a folder"
    elif info.st_uid != os.getuid():
        problem = f"owned by uid {info.st_uid}, not by you (uid {os.getuid()})"
    elif info.st_mode & 0o077:
        problem = f"open to others (mode {stat.S_IMODE(info.st_mode):o}; chmod 700 it)"
    else:
        return path
    raise PermissionError(f"{path} cannot hold the ranks' rendezvous file: it is {problem}")


def join_ranks(place, backend, timeout, rendezvous_dir=RENDEZVOUS_DIR):
    """Start the process group of all the ranks. Those of an ``srun`` step meet
    in a file of the user's private folder on the shared home, not at a
    listening port; torchrun's rendezvous is its own (``MASTER_ADDR``,
    ``MASTER_PORT``). Returns that file (rank 0 removes it at the end), or None."""
    options = dict(rank=place.rank, world_size=place.world_size, timeout=timeout)
    if place.world_size == 1:  # nobody to meet: a store in memory
        dist.init_process_group(backend, store=dist.HashStore(), **options)
        return None
    if place.launcher == "torchrun":
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # when set by hand
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group(backend, init_method="env://", **options)
        return None
    path = private_folder(rendezvous_dir) / place.step
    store = dist.FileStore(str(path), place.world_size)
    store.set_timeout(timeout)
    try:
        dist.init_process_group(backend, store=store, **options)
    except RuntimeError as error:
        if place.rank == 0:
            path.unlink(missing_ok=True)
        if "timeout" not in str(error).lower():  # FileStore: "Wait timeout"
            raise
        raise RuntimeError(
            f"the {place.world_size} ranks did not all meet in {path}: do all the nodes "
            f"share that folder (--rendezvous-dir)? {error}"
        ) from error
    return path


def leave_ranks(rendezvous_file, rank, device):
    """Once every rank is done, rank 0 removes the rendezvous file, and every
    rank leaves the process group."""
    device_ids = [device.index] if device.type == "cuda" else None
    dist.barrier(device_ids=device_ids)  # every rank is done with the file
    if rendezvous_file and rank == 0:
        rendezvous_file.unlink(missing_ok=True)
    # every rank knows it is gone: a FileStore that sees its file on the way
    # out updates it (and would make it anew after a removal)
    dist.barrier(device_ids=device_ids)
    dist.destroy_process_group()


# -- the data ------------------------------------------------------------------


def find_data_dir(data_dir=""):
    """The first folder holding MNIST-format training images."""
    folders = [data_dir] if data_dir else SEARCH_PATH
    for folder in folders:
        folder = Path(folder).expanduser()
        if any(folder.glob("train-images*idx3-ubyte*")):
            return folder
    raise FileNotFoundError(f"no train-images-idx3-ubyte[.gz] in {', '.join(folders)}")


def read_idx(path):
    """An IDX file (plain or gzipped) as a NumPy array of unsigned bytes."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        data = f.read()
    if data[:3] != b"\x00\x00\x08":
        raise ValueError(f"{path} is not an IDX file of unsigned bytes")
    ndim = data[3]
    shape = np.frombuffer(data, dtype=">u4", count=ndim, offset=4)
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_split(folder, split):
    """Images (N, 28, 28) and labels (N,) of the "train" or "t10k" split."""
    images = read_idx(min(folder.glob(f"{split}-images*idx3-ubyte*")))
    labels = read_idx(min(folder.glob(f"{split}-labels*idx1-ubyte*")))
    return images, labels


def class_names(folder):
    is_fashion = "fashion" in str(folder.resolve()).lower()
    return FASHION_CLASSES if is_fashion else [str(digit) for digit in range(10)]


class IdxDataset(Dataset):
    """Images as float tensors of shape (1, 28, 28) in [0, 1], with their labels."""

    def __init__(self, images, labels):
        self.images = torch.tensor(images, dtype=torch.float32).div_(255).unsqueeze_(1)
        self.labels = torch.tensor(labels, dtype=torch.long)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


# -- the model -----------------------------------------------------------------


class Net(nn.Module):
    """Two convolutions with max pooling, then two dense layers."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


# -- training ------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=1, help="passes over the training images")
    parser.add_argument(
        "--max-steps", type=int, default=0, help="stop after this many steps in all (0: no limit)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="images per step on each rank")
    parser.add_argument("--learning-rate", type=float, default=0.002)
    parser.add_argument("--data-dir", default="", help="folder of the MNIST-format files")
    parser.add_argument("--log-every", type=int, default=100, help="print every this many steps")
    parser.add_argument(
        "--log-dir",
        type=Path,
        help="TensorBoard scalars and the model (default logs/distributed/DATE-TIME)",
    )
    parser.add_argument(
        "--rendezvous-dir",
        default=RENDEZVOUS_DIR,
        help="under srun: where the ranks meet, a private folder on a file system "
        "that all the nodes share (default %(default)s)",
    )
    return parser.parse_args(argv)


def thread_count(peers, rank):
    """Threads for a rank: the cores Slurm gave each task (SLURM_CPUS_PER_TASK),
    but never more than its share of the cores it may run on, which it shares
    with the ranks of the same machine (kernel) allowed on any of them: all of
    the node's ranks where Slurm does not bind tasks to cores, every rank of
    a cluster whose nodes are containers of one host.

    ``peers``: each rank's ``(machine, cores it may run on)``."""
    machine, cores = peers[rank]
    sharing = sum(1 for m, c in peers if m == machine and c & cores)
    per_task = int(os.environ.get("SLURM_CPUS_PER_TASK") or len(cores))
    return max(1, min(per_task, len(cores) // sharing))


def plural(count, noun):
    return f"{count} {noun}{'' if count == 1 else 's'}"


def machine_id():
    """The running kernel's boot id: the same for every container of a host."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def fingerprint(text):
    """A 64-bit hash of ``text``, as a signed integer (an int64 tensor holds it)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def node_name(codes):
    """A node name from its bytes, with anything but letters, digits, '.', '-'
    and '_' as '?' (the bytes come from another rank)."""
    text = bytes(codes).rstrip(b"\0").decode("ascii", "replace")
    return "".join(c if c.isascii() and (c.isalnum() or c in ".-_") else "?" for c in text)


def where_ranks_run(device):
    """Every rank's node name, and its ``(machine, cores it may run on)`` for
    :func:`thread_count`. The ranks exchange one tensor of integers each, of
    the same size on every rank: the bytes of their node's name, a hash of
    their machine's boot id and a 0/1 flag per core (never pickled objects)."""
    cores = os.sched_getaffinity(0)
    ncores = torch.tensor([max(cores) + 1], dtype=torch.int64, device=device)
    dist.all_reduce(ncores, op=dist.ReduceOp.MAX)  # the cores of the largest node
    ncores = max(1, min(int(ncores), MAX_CORES))
    name = socket.gethostname().encode()[:HOST_NAME_MAX]
    mine = torch.zeros(HOST_NAME_MAX + 1 + ncores, dtype=torch.int64)
    mine[: len(name)] = torch.tensor(list(name), dtype=torch.int64)
    mine[HOST_NAME_MAX] = fingerprint(machine_id())
    mine[HOST_NAME_MAX + 1 + torch.tensor(sorted(c for c in cores if c < ncores))] = 1
    mine = mine.to(device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    names, peers = [], []
    for row in everyone:
        row = row.cpu()
        names.append(node_name(row[:HOST_NAME_MAX].clamp(0, 255).tolist()))
        flags = row[HOST_NAME_MAX + 1 :]
        peers.append((int(row[HOST_NAME_MAX]), frozenset(flags.nonzero().flatten().tolist())))
    return names, peers


def main(argv=None):
    args = parse_args(argv)
    place = find_place()
    if torch.cuda.is_available():
        # srun gives each task every GPU of its node: rank i on a node takes GPU i
        device = torch.device("cuda", place.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend, device_name = "nccl", torch.cuda.get_device_name(device)
    else:
        device, backend, device_name = torch.device("cpu"), "gloo", "cpu"
    rendezvous_file = join_ranks(place, backend, timedelta(minutes=5), args.rendezvous_dir)
    try:
        train(args, device, backend, device_name)
    except BaseException:
        if rendezvous_file and place.rank == 0:  # a rank failed: no barrier to wait at
            rendezvous_file.unlink(missing_ok=True)
        raise
    leave_ranks(rendezvous_file, place.rank, device)


def train(args, device, backend, device_name):
    """Train and test the model on this rank, one of the process group's."""
    use_amp = device.type == "cuda"  # float16 mixed precision on GPUs
    rank, world_size = dist.get_rank(), dist.get_world_size()
    is_main = rank == 0
    # where every rank runs: its node, machine and cores
    names, peers = where_ranks_run(device)
    node_names = list(dict.fromkeys(names))
    threads = thread_count(peers, rank)
    torch.set_num_threads(threads)
    # on GPUs, a few cores feed them batches; on CPUs, all of them compute
    loader_workers = min(4, threads // 4) if use_amp else 0

    def log(text):
        if is_main:
            print(text, flush=True)

    log(
        f"Training on {plural(world_size, 'rank')} across {plural(len(node_names), 'node')} "
        f"({', '.join(node_names)}) with {backend} on {device_name}: batches of "
        f"{args.batch_size} per rank ({args.batch_size * world_size} in all), "
        f"{plural(threads, 'thread')} per rank"
    )

    folder = find_data_dir(args.data_dir)
    train_set = IdxDataset(*load_split(folder, "train"))
    test_set = IdxDataset(*load_split(folder, "t10k"))
    log(f"{folder}: {len(train_set)} training and {len(test_set)} test images")
    # each rank trains on its own 1/world_size of the images, reshuffled every epoch
    sampler = DistributedSampler(
        train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=0, drop_last=True
    )
    loader_options = dict(
        batch_size=args.batch_size,
        num_workers=loader_workers,
        persistent_workers=loader_workers > 0,
        pin_memory=device.type == "cuda",
    )
    train_loader = DataLoader(train_set, sampler=sampler, drop_last=True, **loader_options)
    # and tests every world_size-th test image
    test_part = Subset(test_set, range(rank, len(test_set), world_size))
    test_loader = DataLoader(test_part, **loader_options)

    torch.manual_seed(0)  # the same initial weights on every rank
    model = Net().to(device)
    ddp_model = DistributedDataParallel(
        model, device_ids=[device] if device.type == "cuda" else None
    )
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.learning_rate)
    scaler = torch.amp.GradScaler(device.type, enabled=use_amp)
    loss_fn = nn.CrossEntropyLoss()

    def over_ranks(*values, op=dist.ReduceOp.SUM):
        """The values summed (or reduced by ``op``) over all the ranks."""
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=op)
        return tensor.tolist()

    def evaluate():
        """The fraction of the test images the model classifies right, over all ranks."""
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.float16, enabled=use_amp):
            for images, labels in test_loader:
                images, labels = images.to(device), labels.to(device)
                correct += (model(images).argmax(dim=1) == labels).sum().item()
        model.train()
        correct, total = over_ranks(correct, len(test_part))
        return correct / total

    def synchronize():
        """Wait for the GPU to finish its queued work (for honest timings)."""
        if device.type == "cuda":
            torch.cuda.synchronize()

    writer = None
    if is_main:
        from torch.utils.tensorboard import SummaryWriter

        log_dir = args.log_dir or Path(
            "logs", "distributed", datetime.now().strftime("%Y%m%d-%H%M%S")
        )
        writer = SummaryWriter(log_dir)

    step = 0
    trained_images, training_seconds = 0, 0.0
    model.train()
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        seen = 0
        correct = torch.zeros((), dtype=torch.long, device=device)
        start = time.perf_counter()
        for images, labels in train_loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.float16, enabled=use_amp):
                logits = ddp_model(images)
                loss = loss_fn(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()  # averages the gradients of all ranks
            scaler.step(optimizer)
            scaler.update()

            step += 1
            seen += len(labels)
            correct += (logits.argmax(dim=1) == labels).sum()
            if step % args.log_every == 0:
                all_correct, all_seen, all_loss = over_ranks(correct.item(), seen, loss.item())
                accuracy = all_correct / all_seen
                log(f"Epoch {epoch} Global Step {step}, Training Accuracy {accuracy:.4f}")
                if writer:
                    writer.add_scalar("train/loss", all_loss / world_size, step)
                    writer.add_scalar("train/accuracy", accuracy, step)
            if args.max_steps and step >= args.max_steps:
                break
        synchronize()
        # the images of all ranks, in the time of the slowest
        [images_done] = over_ranks(seen)
        [seconds] = over_ranks(time.perf_counter() - start, op=dist.ReduceOp.MAX)
        trained_images += images_done
        training_seconds += seconds
        if writer:
            writer.add_scalar("train/images_per_sec", images_done / seconds, step)

        test_accuracy = evaluate()
        log(f"Test Accuracy {test_accuracy:.4f}")
        if writer:
            writer.add_scalar("test/accuracy", test_accuracy, step)
        if args.max_steps and step >= args.max_steps:
            break

    total = trained_images / training_seconds
    log(f"images/sec per rank: {total / world_size:.1f}")
    log(f"images/sec: {total:.1f} on {device_name}")
    if writer:
        writer.close()
        torch.save(model.state_dict(), Path(writer.log_dir, "model.pt"))
        log(f"Saved the model in {Path(writer.log_dir, 'model.pt')}")


if __name__ == "__main__":
    sys.exit(main())
