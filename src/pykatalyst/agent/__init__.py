"""pykatalyst.agent"""
