"""The expected start of the spawn page's exact choice (issue 38): ``sbatch
--test-only`` as the user, with the resources, account, QOS and reservation
the submission would have, kept a while per user and choice, so that a user
changing their mind does not ask Slurm at every keystroke, and at most
``MAX_KEPT`` answers are held."""

import time

from portal.slurm import commands as slurm

KEPT_SECONDS = 30.0  # an answer is kept this long (Slurm's own plan moves slowly)
MAX_KEPT = 2000
_kept = {}  # (user, Slice) -> (monotonic time, start or None, error)


async def start_for(username, job_slice, timeout):
    """``(datetime or None, error text)`` of ``username``'s ``job_slice``."""
    key = (username, job_slice)
    now = time.monotonic()
    kept = _kept.get(key)
    if kept and now - kept[0] < KEPT_SECONDS:
        return kept[1], kept[2]
    try:
        start, error = await slurm.expected_start_as(username, job_slice, timeout), ""
    except slurm.SlurmError as e:
        start, error = None, str(e)
    if len(_kept) >= MAX_KEPT:
        for old in [k for k, v in _kept.items() if now - v[0] >= KEPT_SECONDS] or list(_kept):
            del _kept[old]
    _kept[key] = (now, start, error)
    return start, error
