"""The copy pipeline: checking a segment, transforming and uploading its pieces, committing its manifest.

The stored format it writes (manifest, piece transforms, re-keying) is `rsm.stored`."""
