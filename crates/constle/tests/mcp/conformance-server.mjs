/**
 * The MCP server that crates/constle/tests/conformance.rs runs the official
 * conformance suite against, directly and through the gate. It offers what
 * the suite's active server scenarios call (their tools, resources and
 * prompts, completion, logging, sampling and elicitation), built on the
 * official TypeScript SDK.
 *
 *     node conformance-server.mjs [PORT]
 *     node conformance-server.mjs --stdio
 *
 * The first serves Streamable HTTP on 127.0.0.1:PORT (or `$PORT`; 0 or
 * none for any free port), with the SDK's DNS-rebinding protection (the
 * `Host` header must be loopback), and prints its URL once it listens. The
 * second speaks MCP over stdin and stdout. Node finds the SDK in the
 * `node_modules` next to this file (scripts/setup.sh installs it).
 */

import { randomUUID } from 'node:crypto';

import { completable } from '@modelcontextprotocol/sdk/server/completable.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  isInitializeRequest,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

// A 1x1 red PNG, and a WAV of one silent sample (16-bit mono, 8 kHz).
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA==';

const text = (value) => ({ type: 'text', text: value });
const image = { type: 'image', data: PNG, mimeType: 'image/png' };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A new server for one session: the SDK keeps one client per server. */
function conformanceServer() {
  const server = new McpServer(
    { name: 'constle-conformance-server', version: '1.0.0' },
    { capabilities: { logging: {}, resources: { subscribe: true } } },
  );
  addTools(server);
  addResources(server);
  addPrompts(server);
  return server;
}

function addTools(server) {
  const tool = (name, description, handler, inputSchema) =>
    server.registerTool(name, { description, inputSchema }, handler);

  tool('test_simple_text', 'Answers with one text', () => ({
    content: [text('This is a simple text response for testing.')],
  }));
  tool('test_image_content', 'Answers with an image', () => ({ content: [image] }));
  tool('test_audio_content', 'Answers with audio', () => ({
    content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }],
  }));
  tool('test_embedded_resource', 'Answers with an embedded resource', () => ({
    content: [embedded('test://embedded-resource', 'This is an embedded resource content.')],
  }));
  tool('test_multiple_content_types', 'Answers with text, an image and a resource', () => ({
    content: [text('Multiple content types test:'), image, embedded('test://mixed-content-resource', '{"test":"data","value":123}')],
  }));
  tool('test_error_handling', 'Always fails', () => {
    throw new Error('This tool intentionally returns an error for testing');
  });
  // Notifications sent with `extra` belong to the call, so they travel on
  // its own response stream, before its result.
  tool('test_tool_with_logging', 'Logs three messages while it runs', async (extra) => {
    for (const [i, message] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
      if (i > 0) await sleep(50);
      await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data: message } });
    }
    return { content: [text('Tool with logging executed successfully')] };
  });
  tool('test_tool_with_progress', 'Reports progress 0, 50 and 100 of 100', async (extra) => {
    const progressToken = extra._meta?.progressToken;
    for (const progress of [0, 50, 100]) {
      if (progress > 0) await sleep(50);
      if (progressToken !== undefined) {
        await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress, total: 100 } });
      }
    }
    return { content: [text(`progress reported to ${progressToken}`)] };
  });
  // Requests to the client, related to the call like its notifications.
  tool('test_sampling', 'Asks the client to sample a message', async ({ prompt }, extra) => {
    const result = await server.server.createMessage(
      { messages: [{ role: 'user', content: text(prompt) }], maxTokens: 100 },
      { relatedRequestId: extra.requestId },
    );
    return { content: [text(`LLM response: ${result.content.text}`)] };
  }, { prompt: z.string().describe('The prompt to send to the LLM') });
  tool('test_elicitation', 'Asks the user for a name and an email address', ({ message }, extra) =>
    elicit(server, extra, 'User response', {
      message,
      requestedSchema: {
        type: 'object',
        properties: {
          username: { type: 'string', description: "User's response" },
          email: { type: 'string', description: "User's email address" },
        },
        required: ['username', 'email'],
      },
    }), { message: z.string().describe('The message to show the user') });
  tool('test_elicitation_sep1034_defaults', 'Asks for a form whose fields have defaults', (extra) =>
    elicit(server, extra, 'Elicitation completed', {
      message: 'Please review and update the form fields with defaults',
      requestedSchema: {
        type: 'object',
        properties: {
          name: { type: 'string', description: 'User name', default: 'John Doe' },
          age: { type: 'integer', description: 'User age', default: 30 },
          score: { type: 'number', description: 'User score', default: 95.5 },
          status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
          verified: { type: 'boolean', description: 'Verification status', default: true },
        },
      },
    }));
  tool('test_elicitation_sep1330_enums', 'Asks for a form with every kind of enum', (extra) =>
    elicit(server, extra, 'Elicitation completed', {
      message: 'Please select options from the enum fields',
      requestedSchema: { type: 'object', properties: enumFields() },
    }));
}

/** The five enum shapes of SEP-1330: plain, titled, legacy, and two lists. */
function enumFields() {
  const titled = (word) => [1, 2, 3].map((n) => ({ const: `value${n}`, title: `${['First', 'Second', 'Third'][n - 1]} ${word}` }));
  const options = ['option1', 'option2', 'option3'];
  return {
    untitledSingle: { type: 'string', description: 'Select one option', enum: options },
    titledSingle: { type: 'string', description: 'Select one option with titles', oneOf: titled('Option') },
    legacyEnum: { type: 'string', description: 'Select one option (legacy)', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
    untitledMulti: { type: 'array', description: 'Select multiple options', minItems: 1, maxItems: 3, items: { type: 'string', enum: options } },
    titledMulti: { type: 'array', description: 'Select multiple options with titles', minItems: 1, maxItems: 3, items: { anyOf: titled('Choice') } },
  };
}

/** Puts a form to the user, on the call's stream; says what came back. */
async function elicit(server, extra, said, params) {
  const result = await server.server.elicitInput(params, { relatedRequestId: extra.requestId });
  return { content: [text(`${said}: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`)] };
}

function embedded(uri, body) {
  return { type: 'resource', resource: { uri, mimeType: 'text/plain', text: body } };
}

function addResources(server) {
  const resource = (name, uri, mimeType, contents) =>
    server.registerResource(name, uri, { description: `The ${name} resource`, mimeType }, () => ({
      contents: [{ uri, mimeType, ...contents }],
    }));
  resource('static-text', 'test://static-text', 'text/plain', { text: 'This is the content of the static text resource.' });
  resource('static-binary', 'test://static-binary', 'image/png', { blob: PNG });
  resource('watched-resource', 'test://watched-resource', 'text/plain', { text: 'Watched resource content' });
  server.registerResource(
    'template',
    new ResourceTemplate('test://template/{id}/data', { list: undefined }),
    { description: 'Data for an id', mimeType: 'application/json' },
    (uri, { id }) => ({
      contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }],
    }),
  );
  // The watched resource never changes, so a subscription has nothing to
  // send: both requests only succeed.
  server.server.setRequestHandler(SubscribeRequestSchema, () => ({}));
  server.server.setRequestHandler(UnsubscribeRequestSchema, () => ({}));
}

function addPrompts(server) {
  const user = (content) => ({ role: 'user', content });
  server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, () => ({
    messages: [user(text('This is a simple prompt for testing.'))],
  }));
  // A completable argument is what makes the SDK serve completion/complete.
  server.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two arguments',
      argsSchema: {
        arg1: completable(z.string().describe('First test argument'), (value) =>
          ['test', 'testing', 'tested'].filter((word) => word.startsWith(value))),
        arg2: z.string().describe('Second test argument'),
      },
    },
    ({ arg1, arg2 }) => ({ messages: [user(text(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`))] }),
  );
  server.registerPrompt(
    'test_prompt_with_embedded_resource',
    { description: 'A prompt embedding a resource', argsSchema: { resourceUri: z.string().describe('URI of the resource to embed') } },
    ({ resourceUri }) => ({
      messages: [user(embedded(resourceUri, 'Embedded resource content for testing.')), user(text('Please process the embedded resource above.'))],
    }),
  );
  server.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, () => ({
    messages: [user(image), user(text('Please analyze the image above.'))],
  }));
}

/** Serves a session per client on 127.0.0.1:`port`, and prints its URL. */
function serveHttp(port) {
  const sessions = new Map();
  const openSession = async () => {
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: randomUUID,
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    transport.onclose = () => sessions.delete(transport.sessionId);
    await conformanceServer().connect(transport);
    return transport;
  };
  // On 127.0.0.1, the SDK's app refuses a `Host` that is not loopback (403).
  const app = createMcpExpressApp();
  app.all('/mcp', async (req, res) => {
    const id = req.get('mcp-session-id');
    const transport = id ? sessions.get(id) : isInitializeRequest(req.body) ? await openSession() : undefined;
    if (!transport) {
      const [status, message] = id ? [404, 'Session not found'] : [400, 'No session: initialize first'];
      res.status(status).json({ jsonrpc: '2.0', id: null, error: { code: -32000, message } });
      return;
    }
    await transport.handleRequest(req, res, req.body);
  });
  const listener = app.listen(port, '127.0.0.1', (error) => {
    if (error) throw error;
    console.log(`http://127.0.0.1:${listener.address().port}/mcp`);
  });
}

if (process.argv[2] === '--stdio') {
  await conformanceServer().connect(new StdioServerTransport());
} else {
  serveHttp(Number(process.argv[2] ?? process.env.PORT ?? 0));
}
