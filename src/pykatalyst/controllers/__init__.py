"""pykatalyst.controllers"""
