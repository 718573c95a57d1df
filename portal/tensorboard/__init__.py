"""Kept for sessions started before TensorBoard moved to
``portal.session.tensorboard``: their running servers still launch
``python -P -m portal.tensorboard.serve``. Remove it in the release after."""
