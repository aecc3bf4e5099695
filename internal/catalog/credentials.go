package catalog

import "os"

// Environment variables the credentials and the SQL warehouse fall back to,
// named as the databricks-sdk-go unified auth names them. The output and
// the replay input share them, so one credentials block serves both.
const (
	EnvClientID     = "DATABRICKS_CLIENT_ID"
	EnvClientSecret = "DATABRICKS_CLIENT_SECRET"
	EnvWarehouseID  = "DATABRICKS_WAREHOUSE_ID"
)

// ClientCredentials returns the OAuth client id and secret: each configured
// value, or the environment's when it is empty, and says where each came
// from ("config field client_id, env DATABRICKS_CLIENT_SECRET"). Called
// again with the same configured values it re-reads the environment, which
// is how a secret rotated there is picked up on reconnect.
func ClientCredentials(cfgID, cfgSecret string) (id, secret, source string) {
	id, secret = cfgID, cfgSecret
	src := [2]string{"config field client_id", "config field client_secret"}
	if id == "" {
		id, src[0] = os.Getenv(EnvClientID), "env "+EnvClientID
	}
	if secret == "" {
		secret, src[1] = os.Getenv(EnvClientSecret), "env "+EnvClientSecret
	}
	return id, secret, src[0] + ", " + src[1]
}
