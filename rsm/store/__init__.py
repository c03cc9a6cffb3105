"""The object store (buckets and keys over fsspec) and what the RSM lays out in it: keys, forwards, location records, debris."""
