"""pykatalyst.scheduler"""
