// Runs the zod definitions of the SDK examples through the installed SDKs' own helpers and
// writes the schemas they put on the wire.
const fs = require('fs');
const { z } = require('zod/v4');
const { zodResponseFormat, zodFunction, zodTextFormat, zodResponsesFunction } = require('openai/helpers/zod');
const { zodOutputFormat } = require('@anthropic-ai/sdk/helpers/zod');
const { betaZodTool } = require('@anthropic-ai/sdk/helpers/beta/zod');
const OAI = { package: 'openai', version: '6.49.0', registry: 'npm', zod: '4.6.7', repository: 'https://github.com/openai/openai-node', commit: '7b7d6ca71130d37ec09792c50056b47861f2eccf' };
const ANT = { package: '@anthropic-ai/sdk', version: '1.17.0', registry: 'npm', zod: '4.6.7', repository: 'https://github.com/anthropics/anthropic-sdk-typescript', commit: 'bfa9197f0182084941052be9752c948638421601' };
function write(name, source, body) {
  fs.writeFileSync(`/tmp/corpus-work/corpus/${name}.json`, JSON.stringify(Object.assign({ _source: source }, body), null, 2) + '\n');
}
const S = (base, file, how) => Object.assign({}, base, { file, how });

// openai-node examples/chat-completions/parsing.ts and responses/structured-outputs.ts
const Step = z.object({ explanation: z.string(), output: z.string() });
const MathResponse = z.object({ steps: z.array(Step), final_answer: z.string() });
write('openai-node-math-response', S(OAI, 'examples/chat-completions/parsing.ts', "zodResponseFormat(MathResponse, 'math_response').json_schema.schema"),
  { schema: zodResponseFormat(MathResponse, 'math_response').json_schema.schema });
const tf = zodTextFormat(MathResponse, 'math_response');
write('openai-node-responses-math-response', S(OAI, 'examples/responses/structured-outputs.ts', "zodTextFormat(MathResponse, 'math_response').schema (Responses text.format)"),
  { schema: tf.schema });

// examples/chat-completions/ui-generation.ts: a recursive UI tree
const UISchema = z.lazy(() => z.object({
  type: z.enum(['div', 'button', 'header', 'section', 'field', 'form']),
  label: z.string(),
  children: z.array(UISchema),
  attributes: z.array(z.object({ name: z.string(), value: z.string() })),
}));
write('openai-node-ui-generation', S(OAI, 'examples/chat-completions/ui-generation.ts', "zodResponseFormat(UISchema, 'ui').json_schema.schema (recursive z.lazy)"),
  { schema: zodResponseFormat(UISchema, 'ui').json_schema.schema });

// examples/chat-completions/parsing-tools.ts, parsing-run-tools.ts, responses/structured-outputs-tools.ts
const Table = z.enum(['orders', 'customers', 'products']);
const Column = z.enum(['id', 'status', 'expected_delivery_date', 'delivered_at', 'shipped_at', 'ordered_at', 'canceled_at']);
const Operator = z.enum(['=', '>', '<', '<=', '>=', '!=']);
const OrderBy = z.enum(['asc', 'desc']);
const DynamicValue = z.object({ column_name: z.string() });
const Condition = z.object({ column: z.string(), operator: Operator, value: z.union([z.string(), z.number(), DynamicValue]) });
const Query = z.object({ table_name: Table, columns: z.array(Column), conditions: z.array(Condition), order_by: OrderBy });
const fq = zodFunction({ name: 'query', parameters: Query });
const fr = zodFunction({ name: 'query', function: () => null, parameters: z.object({ location: z.string(), table_name: Table, columns: z.array(Column), conditions: z.array(Condition), order_by: OrderBy }) });
const rq = zodResponsesFunction({ name: 'query', parameters: Query });
write('openai-node-query-tools', S(OAI, 'examples/chat-completions/parsing-tools.ts, parsing-run-tools.ts, responses/structured-outputs-tools.ts',
  "zodFunction({name:'query', parameters: Query}).function.parameters; the runTools variant with a location field; zodResponsesFunction(...).parameters"),
  { tools: [{ name: 'query', inputSchema: fq.function.parameters }, { name: 'query_run_tools', inputSchema: fr.function.parameters }, { name: 'query_responses', inputSchema: rq.parameters }] });

// examples/chat-completions/tool-call-helpers-zod.ts
const books = [
  zodFunction({ name: 'listBooks', function: () => null, parameters: z.object({ genre: z.enum(['mystery', 'nonfiction', 'memoir', 'romance', 'historical']) }) }),
  zodFunction({ name: 'searchBooks', function: () => null, parameters: z.object({ name: z.string() }) }),
  zodFunction({ name: 'getBook', function: () => null, parameters: z.object({ id: z.string() }) }),
];
write('openai-node-book-tools-zod', S(OAI, 'examples/chat-completions/tool-call-helpers-zod.ts', 'zodFunction(...).function.parameters of the three tools'),
  { tools: books.map(t => ({ name: t.function.name, inputSchema: t.function.parameters })) });

// examples/chat-completions/function-call.ts, tool-calls-stream.ts, tool-call-helpers.ts: literal parameters
write('openai-node-book-tools-literal', S(OAI, 'examples/chat-completions/function-call.ts (also tool-calls-stream.ts, tool-call-helpers.ts)', 'the literal parameters objects of the three functions'),
  { tools: [
    { name: 'list', inputSchema: { type: 'object', properties: { genre: { type: 'string', enum: ['mystery', 'nonfiction', 'memoir', 'romance', 'historical'] } } } },
    { name: 'search', inputSchema: { type: 'object', properties: { name: { type: 'string' } } } },
    { name: 'get', inputSchema: { type: 'object', properties: { id: { type: 'string' } } } },
  ] });

// anthropic-sdk-typescript examples
const NumbersResponse = z.object({ primes: z.array(z.number()) });
write('anthropic-ts-numbers-zod', S(ANT, 'examples/structured-outputs-zod.ts', 'zodOutputFormat(NumbersResponse).schema (output_config.format)'),
  { schema: zodOutputFormat(NumbersResponse).schema });
write('anthropic-ts-numbers-json-schema', S(ANT, 'examples/structured-outputs-json-schema.ts', 'the literal schema given to jsonSchemaOutputFormat'),
  { schema: { type: 'object', properties: { primes: { type: 'array', items: { type: 'number' } } }, required: ['primes'] } });
const adv = [
  betaZodTool({ name: 'getWeather', description: 'Get the weather at a specific location', inputSchema: z.object({ location: z.string().describe('The city and state, e.g. San Francisco, CA') }), run: () => '' }),
  betaZodTool({ name: 'getTime', description: 'Get the current time in a specific timezone', inputSchema: z.object({ timezone: z.string().describe('The timezone, e.g. America/Los_Angeles') }), run: () => '' }),
  betaZodTool({ name: 'getCurrencyExchangeRate', description: 'Get the exchange rate between two currencies', inputSchema: z.object({ from_currency: z.string().describe('The currency to convert from, e.g. USD'), to_currency: z.string().describe('The currency to convert to, e.g. EUR') }), run: () => '' }),
];
write('anthropic-ts-tools-zod', S(ANT, 'examples/tools-helpers-advanced.ts (getWeather also tools-helpers-zod.ts)', 'betaZodTool(...).input_schema of the three tools'),
  { tools: adv.map(t => ({ name: t.name, inputSchema: t.input_schema })) });
write('anthropic-ts-tools-literal', S(ANT, 'examples/tools.ts, tools-helpers-json-schema.ts', 'the literal input_schema objects'),
  { tools: [
    { name: 'get_weather', inputSchema: { type: 'object', properties: { location: { type: 'string' } } } },
    { name: 'getWeather', inputSchema: { type: 'object', properties: { location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' } }, required: ['location'] } },
  ] });
console.log('ok');
