// A real OAuth 2.1 / OpenID authorization server for the authorization tests: node oidc-provider (pinned in
// package.json), configured with resource indicators (RFC 8707) that issue JWT access tokens (RFC 9068) whose
// audience is the requested resource, client credentials, introspection (RFC 7662) and dynamic registration.
//
// usage: node authorization_server.mjs PORT [TTL_SECONDS]
// Prints "ready ISSUER" on stdout once it listens. Clients (secret "secret-<id>"):
//   gateway-tests: client_credentials, any resource, scopes "mcp:tools mcp:admin"
//   gateway-upstream: the gateway's own client for its upstream (client_credentials, introspection)
import { generateKeyPairSync } from 'node:crypto';
import Provider from 'oidc-provider';

const port = Number(process.argv[2] || 0);
const ttl = Number(process.argv[3] || 300);
const issuer = `http://127.0.0.1:${port}`;
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signing = { ...privateKey.export({ format: 'jwk' }), kid: 'signing-1', use: 'sig', alg: 'RS256' };
const SCOPES = 'mcp:tools mcp:admin';

const client = (id) => ({
  client_id: id, client_secret: `secret-${id}`, grant_types: ['client_credentials'], redirect_uris: [],
  response_types: [], scope: SCOPES,
});

const provider = new Provider(issuer, {
  jwks: { keys: [signing] },
  clients: [client('gateway-tests'), client('gateway-upstream')],
  scopes: ['openid', 'offline_access', 'mcp:tools', 'mcp:admin'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, c, oneOf) => oneOf,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource) => ({
        scope: SCOPES, audience: resource, accessTokenTTL: ttl, accessTokenFormat: 'jwt',
      }),
    },
  },
});
provider.proxy = false;
const server = provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
