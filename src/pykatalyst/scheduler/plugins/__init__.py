"""Scheduler plugins: each hook judges every node at once.

Importing this package registers nothing: `scheduler.intree.in_tree_registry` maps each
plugin's name to its class and args.
"""
