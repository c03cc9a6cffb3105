"""What the store holds, read from manifests alone: the planner shared by every reader of the store.

The Spark reader, `rsm migrate` and `rsm store` all ask the same questions of a store, without a broker
or the metadata topic: which topic ids a topic name has had, every location its segments went to, the
committed segments of each partition, and one consistent history per partition (retried copies and
truncated leader-epoch branches resolved). This package answers them once, below all of its users:

- `locations`: the per-topic record of every (bucket, prefix) a topic has written to, kept by the RSM,
  plus the fallback scan for stores written before the record existed;
- `segments`: committed segments (manifests) of a topic id across its locations;
- `history`: one history per partition from the segments' leader-epoch chains, and `History`, what
  readers ask of one (answered by `PartitionHistory` and `RangedHistory` alike);
- `keys`: a partition's copies as listings name them (base offsets from the keys, no manifest read);
- `ranged`: a partition's history answered for a range from that range's manifests only (planning
  that does not grow with history), the whole history still there for whoever asks; it reads a
  partition's copies through `listing` (listed further where a range needs it), and `topic_listing` lists
  a topic id's partitions for them (`TopicCatalog.ranged_histories`);
- `holes`: the offsets a partition's history lacks (between segments, before the first one), named alike
  by every reader; `unreadable`: the known locations a plan could not read;
- `catalog`: `TopicCatalog`, the entry point tying them to a configured store.
"""

from rsm.catalog.catalog import TopicCatalog, TopicNotFound
from rsm.catalog.history import History, PartitionHistory, SegmentSlice, resolve_history
from rsm.catalog.ranged import RangedHistory
from rsm.catalog.segments import StoredSegment
from rsm.store.locations import LocationRegistry

__all__ = [
    "History",
    "LocationRegistry",
    "PartitionHistory",
    "RangedHistory",
    "SegmentSlice",
    "StoredSegment",
    "TopicCatalog",
    "TopicNotFound",
    "resolve_history",
]
