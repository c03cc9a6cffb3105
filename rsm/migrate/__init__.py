"""`rsm migrate`: move, re-key, verify, garbage-collect, import and export tiered data, without a broker.

Operators change where data lives and which keys protect it, clusters are retired while their history must
stay readable, and crashes leave debris. These jobs work on the store directly, planned from the same
catalog the Spark reader uses (`rsm.catalog`: every location of a topic, its committed segments, one
history per partition), run standalone on threads or at scale as a Spark job.

One module per job, each documenting its steps and guarantees:

- `plan`: what a run will do, from the catalog (items: one segment copy each; units: one segment);
- `journal`: the job's journal in the store (the format other tools read), lock, resumption, crash points;
- `move`: relocation, with forwards (`rsm.store.forward`) so brokers holding old custom metadata still fetch and
  delete; `transfer`: server-side / kernel copies;
- `cross`: a topic from another store (backend) into this one, the source only read, forwards written here;
- `rekey`: key re-wrap (manifests only) and re-encryption (data rewritten through a staging copy);
- `verify`: every segment against its manifest (`--deep`: every batch and index), orphans, key ids;
- `gc`: orphans older than a grace period, stale multipart uploads;
- `import_` / `export`: a Kafka partition directory into the store, and back out;
- `engines`: local threads or Spark, and the driver of a run.

Guarantees of every command: the plan first (`--dry-run` prints it: what, where, how many bytes); at most
`--parallel` transfers at once (local engine); progress with bytes, rate and ETA; a journal in the store, so
a run killed at any moment (`kill -9`) resumes where it stopped when run again; idempotent (a second run
finds nothing left to do); a source object is never deleted before its copy is verified; memory bounded
whatever the segment size.
"""
