"""pykatalyst.cli"""
