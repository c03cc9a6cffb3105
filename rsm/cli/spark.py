"""``rsm spark jar``: the path of the columnar scan's jar, built first if needed.

    spark-submit --jars "$(rsm spark jar)" app.py

With the jar on Spark's class path, ``format("kafka-tiered")`` is the columnar scan (Arrow batches straight
into Spark, column pruning, counts from batch headers); without it, the Python Data Source. An installed
wheel ships the jar prebuilt (no compiler needed; a pyspark of another Spark line than the one it was built
for is refused in one line); a checkout compiles it from its sources against the installed pyspark's jars
(a JDK 17+ is needed once).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "spark",
        help="the Spark side: the columnar scan's jar",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="spark_action", metavar="ACTION")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    p = actions.add_parser(
        "jar",
        help="print the columnar scan's jar path (the packaged one; in a checkout, built first if needed)",
    )
    p.add_argument("--no-build", action="store_true", help="fail instead of building a missing jar")
    p.set_defaults(func=_jar)


def _jar(args: argparse.Namespace) -> int:
    import sys

    from spark_reader.jar import jar_path

    def building(out: str) -> None:  # on stderr: stdout is the path alone, for "$(rsm spark jar)"
        print(f"building the kafka-tiered jar with javac (once, about half a minute): {out}", file=sys.stderr)

    print(jar_path(build_if_missing=not args.no_build, on_build=building))
    return 0
