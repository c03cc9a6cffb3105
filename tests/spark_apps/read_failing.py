"""A user's Spark application whose reads fail, run by `spark-submit` in tests/spark/test_spark_task_errors.py.

    spark-submit --master local[2] [--jars JAR] read_failing.py CASES_JSON OUT_JSON

CASES_JSON maps a case's name to the options of one `spark.read.format("kafka-tiered")...collect()`.
The session is built the plain way (Spark's defaults, master from spark-submit) and the source
registered with `spark_reader.register`. Each query's failure is caught as a user's code catches it and
written to OUT_JSON (the exception's class and message), never printed: the console is Spark's own.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession


def main() -> None:
    cases, out = json.loads(sys.argv[1]), sys.argv[2]
    spark = SparkSession.builder.appName("read-failing").getOrCreate()
    import spark_reader

    spark_reader.register(spark)
    results = {}
    for name, options in cases.items():
        try:
            rows = spark.read.format("kafka-tiered").options(**options).load().collect()
        except Exception as exc:  # noqa: BLE001 - what the user's code catches is the point
            kind = type(exc)
            results[name] = {"type": f"{kind.__module__}.{kind.__qualname__}", "message": str(exc)}
        else:
            results[name] = {"rows": len(rows)}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(results, f)
    spark.stop()


if __name__ == "__main__":
    main()
