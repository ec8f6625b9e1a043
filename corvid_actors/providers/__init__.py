"""providers"""
