"""loadtest"""
