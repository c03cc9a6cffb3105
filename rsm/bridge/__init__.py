"""The broker bridge: a long-lived process hosting one RemoteStorageManager for the JVM plugin."""
