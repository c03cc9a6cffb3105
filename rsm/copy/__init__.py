"""The copy pipeline's stored formats and stages: the manifest, chunk transforms (compression, encryption), re-keying."""
