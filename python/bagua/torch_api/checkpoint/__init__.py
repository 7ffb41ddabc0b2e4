"""Saving and loading training checkpoints in upstream Bagua's directory layout
(:func:`save_checkpoint`, :func:`load_checkpoint`)."""

from bagua.torch_api.checkpoint.checkpointing import load_checkpoint, save_checkpoint

__all__ = ["load_checkpoint", "save_checkpoint"]
