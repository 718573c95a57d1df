"""`make bench`: the benchmarks of issue 8, against the real one-machine cluster.

``python -m bench`` starts two hubs of its own beside the demo and test hubs:
the portal (``PortalSpawner``, job name ``portal-bench``, ports 28000/28081/28001)
and stock batchspawner (``batchspawner.SlurmSpawner``, job name
``portal-stock``, ports 29000/29081/29001), measures, and prints one
``name: value`` line per figure. See ``bench/run.py`` for what each figure is.
"""
