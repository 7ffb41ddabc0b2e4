"""A dataset wrapper that caches samples in a distributed key-value store."""

from torch.utils.data.dataset import Dataset

from bagua.torch_api.contrib.cache_loader import DEFAULT_WRITER_BUFFER_BYTES, CacheLoader

__all__ = ["CachedDataset"]


class CachedDataset(Dataset):
    """Wraps a PyTorch dataset and caches its samples, so that a sample is produced (read,
    decoded, preprocessed) once and later accesses read the cache.

    Samples are stored under ``"{dataset_name}_{index}"`` in a distributed key-value store
    (a :class:`~bagua.torch_api.contrib.cache_loader.CacheLoader`; its other arguments, such
    as ``hosts``, ``cluster_mode``, ``capacity_per_node``, ``password`` and ``timeout`` of
    the Redis backend, go in ``**kwargs``).

    A sample read from the cache is unpickled only when its HMAC shows this job wrote it
    (see :class:`~bagua.torch_api.contrib.utils.redis_store.RedisStore`); anything else, a
    server that does not answer in time, or a sample that could not be stored, reads as a
    miss and the sample is produced by ``dataset`` again.

    Args:
        dataset: the PyTorch dataset to wrap.
        backend (str): the key-value store: ``"redis"``.
        dataset_name (str): prefix of the keys. Default: ``""``.
        writer_buffer_size (int): number of new samples collected before they are written to
            the store in one batch. Default: 20.
        writer_buffer_bytes (int): most bytes the samples waiting to be written may take;
            failed writes beyond it are dropped. Default: 256 MiB.

    Example::

        >>> from bagua.torch_api.contrib.cached_dataset import CachedDataset
        >>> cached_dataset = CachedDataset(dataset, backend="redis", dataset_name="ds")
        >>> dataloader = torch.utils.data.DataLoader(cached_dataset)
    """

    def __init__(self, dataset: Dataset, backend: str = "redis", dataset_name: str = "",
                 writer_buffer_size: int = 20,
                 writer_buffer_bytes: int = DEFAULT_WRITER_BUFFER_BYTES, **kwargs):
        self.dataset = dataset
        #: The cache loader holding the samples.
        self.cache_loader = CacheLoader(backend, dataset_name, writer_buffer_size,
                                        writer_buffer_bytes, **kwargs)

    def __getitem__(self, item):
        return self.cache_loader.get(item, lambda x: self.dataset[x])

    def __len__(self):
        return len(self.dataset)
