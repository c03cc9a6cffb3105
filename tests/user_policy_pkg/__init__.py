"""Policies written the way a user writes them (the seed's per-record `validate`), in a module outside the
project's packages: the copy loads them by class name and drives them through the per-record adapter."""
