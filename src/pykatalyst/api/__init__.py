"""pykatalyst.api"""
