"""The fetch path: segment readers over stored chunks, and the caches they share."""
