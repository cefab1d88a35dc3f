
ByJa4=7a4J5l5J5