"""What score and report share: sacreBLEU metrics, experiment tables, markdown and figures."""
