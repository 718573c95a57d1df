"""What a session is, as pure code: importing this package loads no
jupyterhub, batchspawner or tornado (the hub, the admin service, the deploy
scripts and the unit tests all use it).

- ``numbers``: the one whole-number parser of every numeric field;
- ``slice``: the GPU slice, the only source of a job's resources;
- ``profiles``: what users may ask for, and its validation;
- ``script``: the batch script, rendered sandboxed and quoted;
- ``tlsnames``: the names an internal TLS certificate covers.
"""
