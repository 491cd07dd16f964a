"""The built-in predictor: seasonal forecasts behind Katalyst's `/openapi/tsa/predict`."""
