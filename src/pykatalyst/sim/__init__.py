"""pykatalyst.sim"""
