"""pykatalyst.cluster"""
