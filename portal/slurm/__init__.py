"""The one Slurm layer: every command line the portal runs (``commands``),
how it runs as a user and with which environment and timeout, the parsing of
every output (``parse``) and what the portal knows of jobs, nodes and
partitions (``model``). Importing it loads no jupyterhub, batchspawner or
tornado.
"""
