"""pykatalyst.runtime"""
