"""What the user's Jupyter server says about its own Slurm job, for JupyterLab.

Run in the session's server, wired by ``portal.tensorboard``'s server
extension; its handlers are behind the server's own login:

- ``timeleft`` (``jobend``: the end, from squeue): ``{base_url}portal/api/session``,
  the job's end as Slurm has it and the minutes before it that JupyterLab warns;
- ``gpus`` (``nvml``: the job's own GPUs): ``{base_url}portal/api/gpus``, the
  slice's GPU use;
- ``activity``: the session's activity, reported to the hub for its idle culler.
"""
