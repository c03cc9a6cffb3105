"""Test harness: the real components the test suite runs against.

Each module starts one real thing on free 127.0.0.1 ports, stops it reliably (context managers,
pytest finalizers and an atexit safety net) and fails with the tail of its log when it does not come up:

- :mod:`harness.maven`: builds ``tests/java`` (Kafka 4.4.0 broker jars and the Java oracle) into
  ``<repo>/.cache`` with Maven, once per change of the Java sources;
- :mod:`harness.kafka`: a single-node KRaft Apache Kafka broker (:class:`KafkaBroker`), and
  :func:`tiered_storage_props` to switch tiered storage on with any RemoteStorageManager class;
- :mod:`harness.s3`: a moto S3 server (:class:`S3Server`);
- :mod:`harness.clouds`: fake-gcs-server and Azurite (:class:`FakeGcsServer`, :class:`AzuriteServer`),
  installed into ``<repo>/.cache`` by :mod:`harness.emulators`;
- :mod:`harness.spark`: a ``local[2]`` Spark session;
- :mod:`harness.oracle`: Kafka's own classes writing, dumping and checking segments (:class:`JavaOracle`).

The pytest fixtures wrapping them live in ``tests/conftest.py``.
"""

from harness.kafka import KafkaBroker, KafkaStartError, tiered_storage_props
from harness.maven import JavaBuild, MavenError, build_test_java
from harness.oracle import Codec, JavaOracle, OracleError
from harness.s3 import S3Server

__all__ = [
    "Codec",
    "JavaBuild",
    "JavaOracle",
    "KafkaBroker",
    "KafkaStartError",
    "MavenError",
    "OracleError",
    "S3Server",
    "build_test_java",
    "tiered_storage_props",
]
