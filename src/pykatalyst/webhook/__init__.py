"""pykatalyst.webhook"""
