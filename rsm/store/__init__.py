"""The object store (buckets and keys over fsspec) and what the RSM reads and writes in it: forwards, location
records, debris, topic overlays (the documents' formats are the stored format's, `rsm.stored`)."""

# each backend module registers its store class with `rsm.store.objects` (the factory chooses among them)
from rsm.store import azure, gcs, local, s3  # noqa: E402, F401

__all__: list[str] = []
