"""Whole-store work: ``fsck.py`` (verify), ``gc.py`` (reachability, collection),
``bundles.py`` (export and import). Each runs off the event loop, under the
store's maintenance lock where it writes."""
