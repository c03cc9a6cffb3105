"""PySpark data source reading tiered segments straight from object storage (built in a later issue)."""
