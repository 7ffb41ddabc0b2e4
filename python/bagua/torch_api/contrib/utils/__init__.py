"""Key-value stores behind Bagua's dataset cache: :mod:`.store` (the interfaces) and
:mod:`.redis_store` (Redis servers, which needs the ``redis`` client package)."""

__all__ = ["redis_store", "store"]
