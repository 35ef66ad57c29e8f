"""The analyses: one .sql file per pack, shipped inside the wheel as package data."""
