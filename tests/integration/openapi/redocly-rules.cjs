// The Redocly plugin `tollgate` that redocly.yaml loads: the conventions of openapi.yaml that
// relate two of its places, which configurable rules (one node at a time) cannot express.
// Plain CommonJS with no dependency: Redocly CLI loads it as it is, nothing is built.
'use strict';

// The methods an OpenAPI path item may hold, OPTIONS aside (answered to listed origins only).
const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'trace'];

// The `const` of a documented header's schema, following $refs.
function headerConst(headers, name, ctx) {
  if (!headers || !headers[name]) return undefined;
  const header = ctx.resolve(headers[name]).node;
  const schema = header && header.schema && ctx.resolve(header.schema).node;
  return schema ? schema.const : undefined;
}

// A preflight's Access-Control-Allow-Methods and a 405's Allow name exactly the methods the path
// serves: a browser refuses a method the preflight does not list, and a client reads Allow to
// learn what the path accepts.
function AllowedMethods() {
  return {
    PathItem: {
      enter(item, ctx) {
        const served = METHODS.filter((m) => item[m]).map((m) => m.toUpperCase());
        const sorted = (list) => [...list].sort().join(', ');
        for (const method of [...METHODS, 'options']) {
          const op = item[method];
          if (!op || !op.responses) continue;
          for (const [status, name] of [['204', 'Access-Control-Allow-Methods'], ['405', 'Allow']]) {
            if (!op.responses[status]) continue;
            const { node: response, location } = ctx.resolve(op.responses[status]);
            const listed = headerConst(response && response.headers, name, ctx);
            if (typeof listed !== 'string' || sorted(listed.split(', ')) !== sorted(served)) {
              ctx.report({
                message: `${method.toUpperCase()} ${ctx.key} ${status}: ${name} must have the const "${served.join(', ')}" (the methods the path serves), not ${JSON.stringify(listed)}`,
                location: location
                  ? location.child(['headers', name])
                  : ctx.location.child([method, 'responses', status]),
              });
            }
          }
        }
      },
    },
  };
}

// The schemas a problem response allows: one, or a `oneOf` of them.
function problemSchemas(schema, ctx, out) {
  const { node, location } = ctx.resolve(schema);
  if (!node) return;
  if (Array.isArray(node.oneOf)) {
    for (const alternative of node.oneOf) problemSchemas(alternative, ctx, out);
  } else {
    out.push({ node, location });
  }
}

// Every error response allows only per-code problem schemas (`allOf: [$ref Problem, {properties:
// {type, status, code}}]`) of its own status, each titled with its code and typed
// `urn:tollgate:problem:{code}`: a client picks the schema by status and the code, and the Rust
// tests find a code's schema by its title.
function ProblemCodes() {
  return {
    Response: {
      enter(response, ctx) {
        const status = Number(ctx.key);
        // A component walked under its own name; it is checked where a status refers to it.
        if (!(status >= 400 && status <= 599)) return;
        const media = response.content && response.content['application/problem+json'];
        if (!media || !media.schema) return; // rule/error-media-type says so
        const found = [];
        problemSchemas(media.schema, ctx, found);
        for (const { node, location } of found) {
          const where = location || ctx.location;
          const allOf = Array.isArray(node.allOf) ? node.allOf : [];
          const own = (allOf[1] && allOf[1].properties) || {};
          const code = own.code && own.code.const;
          if (!allOf[0] || allOf[0].$ref !== '#/components/schemas/Problem' || typeof code !== 'string') {
            ctx.report({
              message: `${status}: not a per-code problem schema (allOf: [$ref Problem, {properties: {code: {const}, ...}}])`,
              location: where,
            });
            continue;
          }
          const expected = { title: code, type: `urn:tollgate:problem:${code}`, status };
          const actual = {
            title: node.title,
            type: own.type && own.type.const,
            status: own.status && own.status.const,
          };
          for (const key of Object.keys(expected)) {
            if (actual[key] !== expected[key]) {
              ctx.report({
                message: `code ${code} under a ${status}: its ${key} must be ${JSON.stringify(expected[key])}, not ${JSON.stringify(actual[key])}`,
                location: where,
              });
            }
          }
        }
      },
    },
  };
}

module.exports = function tollgate() {
  return {
    id: 'tollgate',
    rules: {
      oas3: {
        'allowed-methods': AllowedMethods,
        'problem-codes': ProblemCodes,
      },
    },
  };
};
