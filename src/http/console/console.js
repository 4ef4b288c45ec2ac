// The durability console: a browser view of a running server, over its REST API only.
//
// Plain browser JavaScript without a build step. The server embeds this file and serves it
// under a Content-Security-Policy of `default-src 'self'`, so nothing here evaluates strings,
// loads anything from elsewhere or writes `style` attributes (CSSOM properties are allowed).
// Every text that comes from the server is set with `textContent`, never parsed as HTML.
'use strict';

(() => {
  // ---------------------------------------------------------------------------------------
  // Settings
  // ---------------------------------------------------------------------------------------

  const TOKEN_KEY = 'durability.token';
  // The console is served at {server}/console/, the API at {server}/.
  const API_ROOT = new URL('../', document.baseURI);
  // Browsers open at most 6 connections per host: the console keeps 2 free for navigation.
  const MAX_PARALLEL = 4;
  const TOPICS_PAGE = 100;
  const REFRESH_MS = 5000;
  const HOUR_MS = 3600000;
  // The server caps a page at its maxBatchSize; asking for more costs nothing.
  const TAIL_LIMIT = 1000;
  const TAIL_MAX_ROWS = 20000;
  // The height of a tail row (console.css, #tail tbody tr), and the rows drawn beyond sight.
  const TAIL_ROW_PX = 28;
  const TAIL_OVERSCAN = 10;
  // With at most MAX_PARALLEL partitions each has its own long-poll; with more, the loops
  // take partitions in turn and may wait only briefly on each.
  const LONG_WAIT_MS = 25000;
  const SHORT_WAIT_MS = 250;
  const RETRY_MS = 2000;
  const LETTERS_PAGE = 50;
  const REDRIVE_MAX = 1000;
  const PAYLOAD_CHARS = 200;
  const TOPIC_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;
  const CLUSTER_METRICS = [
    ['durability_cluster_members', 'members'],
    ['durability_cluster_held_volumes', 'held volumes'],
    ['durability_cluster_takeovers_total', 'takeovers'],
    ['durability_cluster_forwards_total', 'forwards'],
    ['durability_cluster_forward_failures_total', 'forward failures'],
    ['durability_open_partitions', 'open partitions'],
  ];

  // ---------------------------------------------------------------------------------------
  // DOM helpers
  // ---------------------------------------------------------------------------------------

  /** An element: `props` are attributes, but `class`, `text` and `on<event>` handlers. */
  function h(tag, props = {}, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'class') el.className = value;
      else if (name === 'text') el.textContent = value;
      else if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
      else el.setAttribute(name, value === true ? '' : String(value));
    }
    el.append(...children.flat(Infinity).filter((child) => child !== null && child !== undefined));
    return el;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';

  function svg(tag, attrs = {}, text) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
    if (text !== undefined) el.textContent = text;
    return el;
  }

  /** The hash of a console route, its parts encoded. */
  function href(...parts) {
    return '#/' + parts.map((part) => encodeURIComponent(String(part))).join('/');
  }

  function link(hash, text, props = {}) {
    return h('a', { href: hash, ...props }, text);
  }

  /** A table in a box that scrolls sideways, so a wide table never widens the page. */
  function table(headings, props = {}) {
    const body = h('tbody', props.body || {});
    // A heading starting with '#' is a number column, aligned right like its cells.
    const head = h('tr', {}, headings.map((title) => (title.startsWith('#')
      ? h('th', { scope: 'col', class: 'num', text: title.slice(1) })
      : h('th', { scope: 'col', text: title }))));
    const wrap = h('div', { class: 'table-wrap' },
      h('table', props.table || {}, h('thead', {}, head), body));
    return { wrap, body };
  }

  function cell(text, className) {
    return h('td', { class: className, text: text === null || text === undefined ? '–' : text });
  }

  /** A row saying there is nothing to show, across `columns` columns. */
  function emptyRow(columns, text) {
    return h('tr', {}, h('td', { colspan: columns, class: 'muted', text }));
  }

  function updatedNote() {
    return `Updated ${timestamp(Date.now())}; refreshed every ${REFRESH_MS / 1000} s.`;
  }

  function number(n) {
    return typeof n === 'number' ? n.toLocaleString('en-US') : '–';
  }

  function pad(n, width = 2) {
    return String(n).padStart(width, '0');
  }

  /** Local date and time to the millisecond; cheap enough for thousands of rows a second. */
  function timestamp(ms) {
    if (typeof ms !== 'number') return '–';
    const d = new Date(ms);
    const date = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    return `${date} ${time}.${pad(d.getMilliseconds(), 3)}`;
  }

  function duration(ms) {
    const s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  function relative(ms) {
    if (typeof ms !== 'number') return '–';
    const delta = ms - Date.now();
    if (Math.abs(delta) < 1000) return 'now';
    return delta > 0 ? `in ${duration(delta)}` : `${duration(delta)} ago`;
  }

  function truncate(text, max) {
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  /** Replaces `box`'s children, keeping the keyboard focus on the link to the same place. */
  function replaceChildrenKeepingFocus(box, ...children) {
    const active = document.activeElement;
    const target = active && box.contains(active) ? active.getAttribute('href') : null;
    box.replaceChildren(...children);
    if (!target) return;
    const links = [...box.querySelectorAll('a[href]')];
    const again = links.find((a) => a.getAttribute('href') === target);
    if (again) again.focus();
  }

  // ---------------------------------------------------------------------------------------
  // The API
  // ---------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message, details = {}) {
      super(message);
      this.status = status;
      this.code = code;
      this.details = details;
    }
  }

  const isAbort = (err) => err && err.name === 'AbortError';

  /** The error of a refused request, from the API's JSON error whatever its nesting. */
  function apiError(status, text) {
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      // Not JSON (a proxy's page): the status says enough.
    }
    const inner = body && typeof body.error === 'object' && body.error ? body.error : body || {};
    const code = inner.code || (typeof body?.error === 'string' ? body.error : `http_${status}`);
    const message = inner.message || body?.message || `${status} ${text.slice(0, 200)}`.trim();
    return new ApiError(status, code, message, inner);
  }

  /**
   * Calls the API at `path` (relative to the server's root) with the session's token; the
   * parsed JSON answer, its text when it is not JSON, `null` for an empty one. Throws
   * `ApiError` (status 0 when the server could not be reached) or an `AbortError`.
   */
  async function api(path, { method = 'GET', body, signal } = {}) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    let text;
    try {
      response = await fetch(new URL(path, API_ROOT), {
        method, headers, signal, cache: 'no-store',
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      text = await response.text();
    } catch (err) {
      if (isAbort(err)) throw err;
      throw new ApiError(0, 'network', `Cannot reach the server (${err.message}).`);
    }
    if (!response.ok) throw apiError(response.status, text);
    if (!text) return null;
    const json = (response.headers.get('Content-Type') || '').includes('json');
    return json ? JSON.parse(text) : text;
  }

  const enc = encodeURIComponent;
  const topicPath = (topic) => `topics/${enc(topic)}`;
  const partitionPath = (topic, p) => `${topicPath(topic)}/partitions/${p}`;

  /** Runs `work(item)` over `items`, at most `limit` at once; stops early once aborted. */
  async function pool(items, limit, signal, work) {
    const queue = [...items];
    const worker = async () => {
      while (queue.length && !signal.aborted) await work(queue.shift());
    };
    await Promise.all(Array.from({ length: Math.min(limit, queue.length) }, worker));
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      }
      signal.addEventListener('abort', done);
    });
  }

  // ---------------------------------------------------------------------------------------
  // Errors and the token
  // ---------------------------------------------------------------------------------------

  function showError(message) {
    const box = document.getElementById('error');
    box.textContent = message;
    box.hidden = false;
  }

  function clearError() {
    const box = document.getElementById('error');
    box.textContent = '';
    box.hidden = true;
  }

  /** Shows what went wrong; a refused token goes back to the token form. */
  function report(err) {
    if (isAbort(err)) return;
    if (err instanceof ApiError && err.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      showTokenForm();
      showError(`The server refused the token: ${err.message}`);
      return;
    }
    showError(err instanceof ApiError ? err.message : `Unexpected error: ${err && err.message}`);
  }

  /** Whether a loop should stop after `err` rather than try again later. */
  function isFinal(err) {
    return isAbort(err) || (err instanceof ApiError && err.status >= 400 && err.status < 500);
  }

  function showTokenForm() {
    stopView();
    setTopicNav(null);
    const input = h('input', {
      id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false',
      'aria-describedby': 'token-help',
    });
    const form = h('form', { id: 'token-form', class: 'stack', onsubmit: signIn },
      h('label', { for: 'token', text: 'Bearer token' }), input,
      h('p', {
        id: 'token-help', class: 'muted',
        text: 'Kept for this tab only. Leave it empty for a server without tokens.',
      }),
      h('div', {}, h('button', { type: 'submit', text: 'Continue' })));
    const main = document.getElementById('view');
    main.replaceChildren(h('h1', { text: 'Sign in' }), form);
    input.focus();
  }

  async function signIn(event) {
    event.preventDefault();
    const token = new FormData(event.target).get('token').trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    clearError();
    try {
      await api('topics?limit=1');
      route();
    } catch (err) {
      report(err);
    }
  }

  // ---------------------------------------------------------------------------------------
  // Views and the router
  // ---------------------------------------------------------------------------------------

  // The open view's abort controller: leaving a view cancels its requests, loops and timers.
  let current = null;

  function stopView() {
    if (current) current.abort();
    current = null;
  }

  /**
   * Runs `loop` every REFRESH_MS until the view closes or a request is refused. An error that
   * may pass (the server unreachable, 5xx) is shown until a later round succeeds.
   */
  async function refreshing(signal, loop) {
    let failing = false;
    while (!signal.aborted) {
      try {
        await loop();
        if (failing) clearError();
        failing = false;
      } catch (err) {
        report(err);
        if (isFinal(err)) return;
        failing = true;
      }
      await sleep(REFRESH_MS, signal);
    }
  }

  const ROUTES = [
    [/^\/topics$/, topicsView],
    [/^\/topics\/([^/]+)$/, topicView],
    [/^\/topics\/([^/]+)\/groups$/, groupsView],
    [/^\/topics\/([^/]+)\/tail$/, (view, topic) => tailView(view, topic, null)],
    [/^\/topics\/([^/]+)\/partitions\/(\d+)\/tail$/, tailView],
    [/^\/topics\/([^/]+)\/groups\/([^/]+)\/leases$/,
      (view, topic, group) => leasesView(view, topic, group, null)],
    [/^\/topics\/([^/]+)\/partitions\/(\d+)\/groups\/([^/]+)\/leases$/,
      (view, topic, p, group) => leasesView(view, topic, group, p)],
    [/^\/dead-letters\/([^/]+)$/, deadLettersView],
    [/^\/cluster$/, clusterView],
  ];

  function route() {
    const hash = location.hash.replace(/^#/, '');
    // Only '#/…' names a view; other fragments (the skip link's) leave the view alone.
    if (hash && !hash.startsWith('/')) return;
    clearError();
    if (sessionStorage.getItem(TOKEN_KEY) === null) {
      showTokenForm();
      return;
    }
    stopView();
    const controller = new AbortController();
    current = controller;
    const main = document.getElementById('view');
    main.replaceChildren(h('p', { class: 'muted loading', text: 'Loading…' }));
    const path = hash || '/topics';
    markNav(path);
    for (const [pattern, view] of ROUTES) {
      const match = pattern.exec(path);
      if (!match) continue;
      let args;
      try {
        args = match.slice(1).map(decodeURIComponent);
      } catch {
        break;
      }
      const context = { main, signal: controller.signal };
      Promise.resolve()
        .then(() => view(context, ...args))
        .catch((err) => {
          if (controller.signal.aborted) return;
          // A view that failed before it drew anything says so beside the error.
          if (main.querySelector('.loading')) heading(main, 'This view could not be loaded');
          report(err);
        });
      return;
    }
    setTopicNav(null);
    heading(main, 'Not found', h('p', {}, 'No view here. ', link('#/topics', 'See the topics.')));
  }

  function markNav(path) {
    for (const a of document.querySelectorAll('#nav a')) {
      const target = a.getAttribute('href').slice(1);
      if (target === path) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }

  /** The nav links of the topic being looked at. */
  function setTopicNav(topic) {
    const box = document.getElementById('nav-topic');
    if (topic === null) {
      box.replaceChildren();
      return;
    }
    box.replaceChildren(
      link(href('topics', topic), topic, { class: 'nav-topic-name' }),
      link(href('topics', topic, 'groups'), 'Groups'),
      link(href('topics', topic, 'tail'), 'Tail'));
    markNav(location.hash.slice(1));
  }

  // Set when the view changed by navigation: keyboard users then land on the new view's
  // heading instead of at the top of the page.
  let focusHeading = false;

  /** Replaces the loading note with the view's heading and first content. */
  function heading(main, title, ...extra) {
    const h1 = h('h1', { tabindex: '-1' }, title);
    main.replaceChildren(h1, ...extra);
    if (focusHeading) h1.focus({ preventScroll: true });
    focusHeading = false;
    return h1;
  }

  // ---------------------------------------------------------------------------------------
  // Topics
  // ---------------------------------------------------------------------------------------

  // Where the topic list is, kept across views so going back returns to the same page: the
  // `after` of the page and what to call it. The API pages forward only, so Previous pops the
  // pages before.
  const topicsPaging = { page: { after: '', label: '' }, before: [] };

  /**
   * The greatest valid topic name sorting before `name`, so that `after` it starts a page at
   * `name` itself: names sort bytewise over `-` `.` `0-9` `A-Z` `_` `a-z`, at most 128 long.
   */
  function justBefore(name) {
    const alphabet = '-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz';
    const last = alphabet.indexOf(name.at(-1));
    const stem = name.slice(0, -1);
    if (last === 0) return stem;
    const before = stem + alphabet[last - 1] + 'z'.repeat(128 - name.length);
    return TOPIC_NAME.test(before) ? before : '';
  }

  async function topicsView({ main, signal }) {
    setTopicNav(null);
    const filter = h('input', {
      id: 'filter', type: 'search', 'data-slash': '', placeholder: 'Filter this page  ( / )',
      'aria-label': 'Filter the topics of this page',
    });
    const jump = h('input', {
      id: 'jump', type: 'text', placeholder: 'topic name', 'aria-label': 'Jump to topic name',
      autocomplete: 'off', spellcheck: 'false',
    });
    const prev = h('button', { type: 'button', id: 'prev', text: '← Previous' });
    const next = h('button', { type: 'button', id: 'next', text: 'Next →' });
    const status = h('span', { class: 'muted', 'aria-live': 'polite' });
    const { wrap, body } = table(['topic', '#partitions', ''], {
      table: { id: 'topics' }, body: { id: 'topic-rows' },
    });
    heading(main, 'Topics');
    main.append(
      h('div', { class: 'toolbar' }, filter,
        h('form', { class: 'inline', onsubmit: jumpTo },
          jump, h('button', { type: 'submit', text: 'Jump' }))),
      wrap,
      h('div', { class: 'toolbar' }, prev, next, status));

    let nextAfter = null;
    let topics = [];

    function render() {
      const needle = filter.value.trim().toLowerCase();
      const shown = topics.filter((t) => t.name.toLowerCase().includes(needle));
      body.replaceChildren(...shown.map((t) => h('tr', { 'data-topic': t.name },
        h('td', {}, link(href('topics', t.name), t.name, { class: 'topic-link' })),
        cell(number(t.partitions), 'num'),
        h('td', { class: 'actions' },
          link(href('topics', t.name, 'groups'), 'groups'),
          link(href('topics', t.name, 'tail'), 'tail')))));
      if (!topics.length) body.append(emptyRow(3, 'No topics here.'));
      status.textContent = `${shown.length} of ${topics.length} shown${topicsPaging.page.label}`;
    }

    async function load() {
      const query = new URLSearchParams({ limit: String(TOPICS_PAGE) });
      if (topicsPaging.page.after) query.set('after', topicsPaging.page.after);
      const page = await api(`topics?${query}`, { signal });
      topics = page.topics;
      nextAfter = page.next;
      next.disabled = !nextAfter;
      prev.disabled = topicsPaging.before.length === 0;
      render();
    }

    function go(page, before) {
      topicsPaging.page = page;
      topicsPaging.before = before;
      load().catch(report);
    }

    const forward = (page) => go(page, [...topicsPaging.before, topicsPaging.page]);

    function jumpTo(event) {
      event.preventDefault();
      const name = jump.value.trim();
      if (name && !TOPIC_NAME.test(name)) {
        showError(`“${name}” is not a topic name: 1 to 128 of A-Z a-z 0-9 . _ -, ` +
          'not starting with a dot.');
        return;
      }
      clearError();
      const first = { after: '', label: '' };
      forward(name ? { after: justBefore(name), label: ` from “${name}”` } : first);
    }

    next.addEventListener('click', () => {
      forward({ after: nextAfter, label: ` after “${nextAfter}”` });
    });
    prev.addEventListener('click', () => {
      go(topicsPaging.before.at(-1), topicsPaging.before.slice(0, -1));
    });
    filter.addEventListener('input', render);
    await load();
  }

  // ---------------------------------------------------------------------------------------
  // One topic
  // ---------------------------------------------------------------------------------------

  async function topicView({ main, signal }, topic) {
    setTopicNav(topic);
    const info = await api(topicPath(topic), { signal });
    const { wrap, body } = table([
      '#partition', '#oldestOffset', '#hotOffset', '#nextOffset', '#retained', '#cold', '#hot',
      '#pendingDeliveries', 'cursors', '#appends / window', '#append ms', '#reads / window',
      '#read ms', '#in flight', '',
    ], { table: { id: 'partitions' }, body: { id: 'partition-rows' } });
    heading(main, `Topic ${topic}`,
      h('p', { class: 'links' },
        link(href('topics', topic, 'tail'), 'Tail the topic'),
        link(href('topics', topic, 'groups'), 'Consumer groups')),
      wrap,
      h('p', {
        class: 'muted',
        text: 'Retained = nextOffset − oldestOffset; cold = records below hotOffset (in the ' +
          'cold tier); hot = records from hotOffset on. Load columns count the last window.',
      }));
    const loadCells = new Map();
    for (const p of info.partitions) {
      const cursors = Object.entries(p.cursors || {})
        .map(([group, at]) => `${group}: ${at}`)
        .join(', ');
      const load = ['appends', 'append-ms', 'reads', 'read-ms', 'in-flight']
        .map((name) => cell('…', `num ${name}`));
      loadCells.set(p.partition, load);
      body.append(h('tr', { 'data-partition': p.partition },
        cell(String(p.partition), 'num'),
        cell(String(p.oldestOffset), 'num oldest-offset'),
        cell(String(p.hotOffset), 'num hot-offset'),
        cell(String(p.nextOffset), 'num next-offset'),
        cell(number(p.nextOffset - p.oldestOffset), 'num'),
        cell(number(Math.max(0, p.hotOffset - p.oldestOffset)), 'num'),
        cell(number(Math.max(0, p.nextOffset - p.hotOffset)), 'num'),
        cell(number(p.pendingDeliveries), 'num pending'),
        cell(cursors || '–', 'cursors'),
        ...load,
        h('td', { class: 'actions' },
          link(href('topics', topic, 'partitions', p.partition, 'tail'), 'tail'))));
    }
    // Load snapshots come after the first paint, a few at a time.
    await pool(info.partitions, MAX_PARALLEL, signal, async (p) => {
      const cells = loadCells.get(p.partition);
      try {
        const load = await api(`${partitionPath(topic, p.partition)}/load`, { signal });
        fillLoad(cells, load);
      } catch (err) {
        if (isAbort(err)) return;
        cells.forEach((c) => { c.textContent = '?'; });
        report(err);
      }
    });
  }

  function fillLoad(cells, load) {
    const ms = (v) => (typeof v === 'number' ? v.toFixed(1) : '–');
    const values = [
      number(load.inbound.completed), ms(load.inbound.averageProcessingMs),
      number(load.outbound.completed), ms(load.outbound.averageProcessingMs),
      number(load.inbound.inFlight + load.outbound.inFlight),
    ];
    cells.forEach((c, i) => { c.textContent = values[i]; });
    const window = `window of ${duration(load.windowMs)}, observed ${timestamp(load.observedAt)}`;
    cells.forEach((c) => { c.title = window; });
  }

  // ---------------------------------------------------------------------------------------
  // Consumer groups of a topic
  // ---------------------------------------------------------------------------------------

  async function groupsView({ main, signal }, topic) {
    setTopicNav(topic);
    const deadLetters = h('p', { id: 'dead-letter-link' });
    const updated = h('p', { class: 'muted', 'aria-live': 'off' });
    const groups = h('div', { id: 'groups' });
    heading(main, `Consumer groups of ${topic}`, deadLetters, groups, updated);
    await refreshing(signal, async () => {
      const answer = await api(`${topicPath(topic)}/groups`, { signal });
      replaceChildrenKeepingFocus(deadLetters, ...deadLetterNote(answer.deadLetterTopic));
      const sections = answer.groups.map((g) => groupSection(topic, g, answer.sampleIntervalMs));
      if (!sections.length) {
        sections.push(h('p', { text: 'No group has a position on this topic.' }));
      }
      replaceChildrenKeepingFocus(groups, ...sections);
      updated.textContent = updatedNote();
    });
  }

  function deadLetterNote(deadLetterTopic) {
    if (!deadLetterTopic) return ['Dead letters are not configured for this topic.'];
    const target = link(href('dead-letters', deadLetterTopic), deadLetterTopic);
    return ['Dead letters go to ', target, '.'];
  }

  function groupSection(topic, group, intervalMs) {
    const leasesOn = (...where) => href('topics', topic, ...where, 'groups', group.group, 'leases');
    const { wrap, body } = table(['#partition', '#cursor', '#nextOffset', '#lag', 'leases', '']);
    for (const p of group.partitions) {
      const leases = p.leases
        ? Object.entries(p.leases).map(([state, count]) => `${state} ${count}`).join(' · ')
        : '–';
      body.append(h('tr', { 'data-partition': p.partition },
        cell(String(p.partition), 'num'),
        cell(p.cursor === null ? 'none' : String(p.cursor), 'num'),
        cell(String(p.nextOffset), 'num'),
        cell(number(p.lag), 'num lag'),
        cell(leases),
        h('td', { class: 'actions' },
          link(leasesOn('partitions', p.partition), 'leases'))));
    }
    const points = lagSeries(group.partitions, intervalMs);
    return h('section', { class: 'group', 'data-group': group.group },
      h('h2', {}, group.group, h('span', { class: 'badge', text: `lag ${number(group.lag)}` })),
      h('p', { class: 'links' }, link(leasesOn(), 'Leases on every partition')),
      lagChart(points, intervalMs, group.group),
      wrap);
  }

  /**
   * The group's lag over the last hour: each partition's samples placed at their times (the
   * last at `until`, one per interval before it) and summed per sampling slot.
   */
  function lagSeries(partitions, intervalMs) {
    const interval = Math.max(1, intervalMs || 1);
    const sums = new Map();
    for (const p of partitions) {
      const history = p.history;
      if (!history || !Array.isArray(history.lags)) continue;
      const n = history.lags.length;
      history.lags.forEach((lag, i) => {
        const slot = Math.round((history.until - (n - 1 - i) * interval) / interval);
        sums.set(slot, (sums.get(slot) || 0) + lag);
      });
    }
    const slots = [...sums.keys()].sort((a, b) => a - b);
    const newest = slots.at(-1);
    return slots
      .filter((slot) => (newest - slot) * interval <= HOUR_MS)
      .map((slot) => ({ t: slot * interval, lag: sums.get(slot) }));
  }

  /** At most `width` points: the highest lag of each run, so no spike is smoothed away. */
  function thin(points, width) {
    if (points.length <= width) return points;
    const per = points.length / width;
    const out = [];
    for (let i = 0; i < width; i++) {
      const run = points.slice(Math.floor(i * per), Math.floor((i + 1) * per));
      out.push(run.reduce((a, b) => (b.lag > a.lag ? b : a)));
    }
    return out;
  }

  function lagChart(all, intervalMs, group) {
    const W = 640;
    const H = 170;
    const left = 56;
    const right = 12;
    const top = 12;
    const bottom = 28;
    const chart = svg('svg', {
      viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img',
      'aria-label': `Lag of ${group} over the last hour`,
    });
    chart.append(svg('title', {}, `Lag of ${group}, sampled every ${duration(intervalMs)}`));
    const label = (x, y, text, anchor = 'start') =>
      svg('text', { x, y, 'text-anchor': anchor, class: 'label' }, text);
    chart.append(
      svg('line', { x1: left, y1: H - bottom, x2: W - right, y2: H - bottom, class: 'axis' }),
      svg('line', { x1: left, y1: top, x2: left, y2: H - bottom, class: 'axis' }));
    if (!all.length) {
      chart.append(label(W / 2, H / 2, 'no lag history yet', 'middle'));
      return h('figure', { class: 'chart-box' }, chart);
    }
    const points = thin(all, W - left - right);
    const t0 = points[0].t;
    const t1 = points.at(-1).t;
    const max = Math.max(1, points.reduce((m, p) => Math.max(m, p.lag), 0));
    const x = (t) => left + (t1 === t0 ? 1 : (t - t0) / (t1 - t0)) * (W - left - right);
    const y = (lag) => H - bottom - (lag / max) * (H - top - bottom);
    const d = points
      .map((p, i) => `${i ? 'L' : 'M'}${x(p.t).toFixed(1)} ${y(p.lag).toFixed(1)}`)
      .join(' ');
    chart.append(
      label(left - 6, top + 4, number(max), 'end'),
      label(left - 6, H - bottom, '0', 'end'),
      label(left, H - 8, t1 > t0 ? `−${duration(t1 - t0)}` : ''),
      label(W - right, H - 8, timestamp(t1).slice(11, 19), 'end'),
      svg('path', { d, class: 'lag-line', 'data-samples': all.length }));
    if (points.length === 1) {
      chart.append(svg('circle', { cx: x(t0), cy: y(points[0].lag), r: 3, class: 'lag-dot' }));
    }
    const caption = `${all.length} samples, latest lag ${number(all.at(-1).lag)}`;
    return h('figure', { class: 'chart-box' }, chart,
      h('figcaption', { class: 'muted', text: caption }));
  }

  // ---------------------------------------------------------------------------------------
  // Live tail
  // ---------------------------------------------------------------------------------------

  function payloadText(record) {
    if (record.tombstone) return '(tombstone)';
    if ('payloadBase64' in record) return `base64:${record.payloadBase64}`;
    return JSON.stringify(record.payload) ?? '';
  }

  function keysText(record) {
    const keys = [];
    if (record.key !== null && record.key !== undefined) keys.push(record.key);
    if ('messageKey' in record) keys.push(`message: ${record.messageKey}`);
    if ('messageKeyBase64' in record) keys.push(`message: base64:${record.messageKeyBase64}`);
    return keys.join(' · ');
  }

  function headersText(record) {
    return (record.headers || [])
      .map((header) => {
        const value = 'value' in header ? header.value : `base64:${header.valueBase64}`;
        return `${header.name}=${value}`;
      })
      .join('; ');
  }

  /** Text cell with the full text in the tooltip when it had to be cut. */
  function cutCell(text, max, className) {
    const td = cell(truncate(text, max), className);
    if (text.length > max) td.title = text;
    return td;
  }

  /**
   * Shows received records newest first, in a window over them: the page keeps up to
   * TAIL_MAX_ROWS records but draws only the rows in sight (they all have one height), so a
   * frame costs the same whatever it keeps, and thousands of records a second cost a redraw a
   * frame. Records wait in a queue and are drawn once per animation frame.
   */
  class TailTable {
    constructor(body, scroller, status) {
      this.body = body;
      this.scroller = scroller;
      this.status = status;
      this.queue = [];
      // Every record kept, oldest first, and those the filter lets through.
      this.kept = [];
      this.shown = [];
      this.received = 0;
      this.paused = false;
      this.needle = '';
      this.frame = 0;
      scroller.addEventListener('scroll', () => this.schedule(), { passive: true });
    }

    push(partition, records) {
      for (const record of records) this.queue.push([partition, record]);
      this.received += records.length;
      this.schedule();
      this.showStatus();
    }

    schedule() {
      if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
    }

    stop() {
      cancelAnimationFrame(this.frame);
      this.frame = 0;
    }

    flush() {
      this.frame = 0;
      if (!this.paused && this.queue.length) this.take(this.queue.splice(0));
      this.draw();
      this.showStatus();
    }

    /** Keeps `batch`, the newest TAIL_MAX_ROWS of all, and holds the view where it is. */
    take(batch) {
      let added = 0;
      for (const [partition, record] of batch) {
        const entry = { partition, record, text: `${keysText(record)}\n${payloadText(record)}`.toLowerCase() };
        this.kept.push(entry);
        if (this.matches(entry)) {
          this.shown.push(entry);
          added += 1;
        }
      }
      const extra = this.kept.length - TAIL_MAX_ROWS;
      if (extra > 0) {
        const oldest = this.kept[extra];
        this.kept.splice(0, extra);
        const gone = this.shown.indexOf(oldest);
        this.shown.splice(0, gone < 0 ? this.shown.length : gone);
      }
      // A reader scrolled down keeps the rows in front of them; at the top, the newest show.
      if (this.scroller.scrollTop > 0) this.scroller.scrollTop += added * TAIL_ROW_PX;
    }

    /** Draws the rows in sight, between two spacers standing for the rest. */
    draw() {
      const total = this.shown.length;
      const first = Math.max(0, Math.floor(this.scroller.scrollTop / TAIL_ROW_PX) - TAIL_OVERSCAN);
      const inSight = Math.ceil(this.scroller.clientHeight / TAIL_ROW_PX) + 2 * TAIL_OVERSCAN;
      const last = Math.min(total, first + inSight);
      const rows = [spacer(first)];
      // Row i from the top is the i-th newest.
      for (let i = first; i < last; i++) rows.push(this.row(this.shown[total - 1 - i]));
      rows.push(spacer(total - last));
      this.body.replaceChildren(...rows);
      this.body.dataset.rows = String(total);
    }

    row({ partition, record }) {
      return h('tr', { 'data-partition': partition, 'data-offset': record.offset },
        cell(String(partition), 'num'),
        cell(String(record.offset), 'num'),
        cell(timestamp(record.appendedAt), 'time'),
        cutCell(keysText(record), 60, 'key'),
        cutCell(headersText(record), 60, 'headers'),
        cutCell(payloadText(record), PAYLOAD_CHARS, 'payload'));
    }

    matches(entry) {
      return !this.needle || entry.text.includes(this.needle);
    }

    filter(needle) {
      this.needle = needle.trim().toLowerCase();
      this.shown = this.kept.filter((entry) => this.matches(entry));
      this.scroller.scrollTop = 0;
      this.schedule();
    }

    setPaused(paused) {
      this.paused = paused;
      this.schedule();
      this.showStatus();
    }

    showStatus() {
      const held = this.paused && this.queue.length
        ? ` · ${number(this.queue.length)} held while paused`
        : '';
      const shown = this.needle ? ` · ${number(this.shown.length)} match` : '';
      this.status.textContent = `${number(this.received)} received${held}${shown}`;
    }
  }

  /** An empty row `rows` rows high, standing for the rows out of sight. */
  function spacer(rows) {
    const tr = h('tr', { class: 'spacer', 'aria-hidden': 'true' });
    tr.style.height = `${rows * TAIL_ROW_PX}px`;
    return tr;
  }

  async function tailView({ main, signal }, topic, partition) {
    setTopicNav(topic);
    const title = partition === null ? `Tail of ${topic}` : `Tail of ${topic} / ${partition}`;
    const pause = h('button', {
      type: 'button', id: 'pause', 'aria-pressed': 'false', text: 'Pause',
    });
    const filter = h('input', {
      id: 'tail-filter', type: 'search', 'data-slash': '',
      placeholder: 'Filter key and payload  ( / )',
      'aria-label': 'Filter rows by key and payload text',
    });
    const status = h('span', { id: 'tail-count', class: 'muted', text: '0 received' });
    const note = h('span', { id: 'tail-note', class: 'muted' });
    const columns = ['#partition', '#offset', 'appended', 'key', 'headers', 'payload'];
    const { wrap, body } = table(columns, { table: { id: 'tail' }, body: { id: 'tail-rows' } });
    wrap.id = 'tail-scroller';
    heading(main, title, h('div', { class: 'toolbar' }, pause, filter, status, note), wrap);
    const rows = new TailTable(body, wrap, status);
    signal.addEventListener('abort', () => rows.stop());
    pause.addEventListener('click', () => {
      rows.setPaused(!rows.paused);
      pause.textContent = rows.paused ? 'Resume' : 'Pause';
      pause.setAttribute('aria-pressed', String(rows.paused));
    });
    let filterTimer = 0;
    filter.addEventListener('input', () => {
      clearTimeout(filterTimer);
      filterTimer = setTimeout(() => rows.filter(filter.value), 120);
    });

    // Only records appended from now on: each partition starts at its nextOffset.
    let starts;
    if (partition === null) {
      const info = await api(topicPath(topic), { signal });
      starts = info.partitions.map((p) => [p.partition, p.nextOffset]);
    } else {
      const bounds = await api(`${partitionPath(topic, partition)}/bounds`, { signal });
      starts = [[Number(partition), bounds.nextOffset]];
    }
    note.textContent = `following ${starts.length} partition${starts.length === 1 ? '' : 's'}`;
    await follow(topic, new Map(starts), rows, signal);
  }

  /**
   * Long-polls every partition of `next` (partition → offset to read from), handing the
   * records to `rows`. At most MAX_PARALLEL requests are in flight.
   */
  async function follow(topic, next, rows, signal) {
    const partitions = [...next.keys()];
    const stopped = new Set();
    let failing = false;

    // Reads one page of `p`; whether more records are already waiting there.
    async function read(p, waitMs) {
      const query = new URLSearchParams({ from: next.get(p), limit: TAIL_LIMIT, waitMs });
      try {
        const page = await api(`${partitionPath(topic, p)}/records?${query}`, { signal });
        if (page.records.length) rows.push(p, page.records);
        next.set(p, page.nextOffset);
        if (failing) clearError();
        failing = false;
        return page.lag > 0;
      } catch (err) {
        if (isAbort(err)) return false;
        if (err instanceof ApiError && err.code === 'log_truncated') {
          // Retention removed records before they were read: go on from what is left.
          next.set(p, err.details.oldestOffset);
          return true;
        }
        report(err);
        if (isFinal(err)) {
          stopped.add(p);
        } else {
          failing = true;
          await sleep(RETRY_MS, signal);
        }
        return false;
      }
    }

    if (partitions.length <= MAX_PARALLEL) {
      await Promise.all(partitions.map(async (p) => {
        while (!signal.aborted && !stopped.has(p)) await read(p, LONG_WAIT_MS);
      }));
      return;
    }
    // More partitions than requests: the workers take them in turn, one worker per partition
    // at a time (two reading one partition from the same offset would show its records twice).
    let turn = 0;
    const reading = new Set();
    const worker = async () => {
      while (!signal.aborted && stopped.size < partitions.length) {
        const p = partitions[turn++ % partitions.length];
        if (stopped.has(p) || reading.has(p)) continue;
        reading.add(p);
        // A partition with a backlog is drained before the worker moves on.
        while (!signal.aborted && !stopped.has(p) && await read(p, SHORT_WAIT_MS));
        reading.delete(p);
      }
    };
    await Promise.all(Array.from({ length: MAX_PARALLEL }, worker));
  }

  // ---------------------------------------------------------------------------------------
  // Leases of a group
  // ---------------------------------------------------------------------------------------

  async function leasesView({ main, signal }, topic, group, partition) {
    setTopicNav(topic);
    const where = partition === null ? 'every partition' : `partition ${partition}`;
    const columns = [
      '#partition', 'batchId', 'state', '#firstOffset', '#lastOffset', '#attempt', 'expires',
    ];
    const { wrap, body } = table(columns, { table: { id: 'leases' }, body: { id: 'lease-rows' } });
    const note = h('p', { class: 'muted' });
    const deadLetters = h('p', { id: 'dead-letter-link' });
    heading(main, `Leases of ${group} on ${topic}, ${where}`,
      h('p', { class: 'links' },
        partition === null
          ? null
          : link(href('topics', topic, 'groups', group, 'leases'), 'Every partition'),
        link(href('topics', topic, 'groups'), 'All groups')),
      deadLetters, wrap, note);

    api(`${topicPath(topic)}/groups`, { signal })
      .then((answer) => deadLetters.replaceChildren(...deadLetterNote(answer.deadLetterTopic)))
      .catch((err) => {
        if (!isAbort(err)) deadLetters.textContent = `Dead-letter topic unknown: ${err.message}`;
      });

    let partitions = [Number(partition)];
    if (partition === null) {
      const info = await api(topicPath(topic), { signal });
      partitions = info.partitions.filter((p) => p.nextOffset > 0).map((p) => p.partition);
    }
    await refreshing(signal, async () => {
      const found = [];
      let disabled = null;
      await pool(partitions, MAX_PARALLEL, signal, async (p) => {
        try {
          const path = `${partitionPath(topic, p)}/groups/${enc(group)}/leases`;
          const answer = await api(path, { signal });
          for (const lease of answer.leases) found.push({ partition: p, ...lease });
        } catch (err) {
          if (err instanceof ApiError && err.code === 'leases_disabled') disabled = err.message;
          else throw err;
        }
      });
      found.sort((a, b) => a.partition - b.partition || a.firstOffset - b.firstOffset);
      body.replaceChildren(...found.map((lease) => h('tr', {
        'data-partition': lease.partition,
        'data-batch': lease.batchId,
        class: `lease ${lease.state}`,
      },
      cell(String(lease.partition), 'num'),
      cell(lease.batchId, 'batch'),
      cell(lease.state, 'state'),
      cell(String(lease.firstOffset), 'num'),
      cell(String(lease.lastOffset), 'num'),
      cell(String(lease.attempt), 'num'),
      h('td', { title: timestamp(lease.expiresAt), text: relative(lease.expiresAt) }))));
      if (!found.length) {
        body.append(emptyRow(7, disabled || 'No leases now.'));
      }
      note.textContent = updatedNote();
    });
  }

  // ---------------------------------------------------------------------------------------
  // Dead letters
  // ---------------------------------------------------------------------------------------

  /** A letter's source from its deduplication key `{topic}:{partition}:{offset}`. */
  function letterSource(key) {
    const match = /^(.*):(\d+):(\d+)$/.exec(key || '');
    if (!match) return null;
    return { topic: match[1], partition: Number(match[2]), offset: Number(match[3]) };
  }

  /** Records [from, to) of a partition, over as many pages as the server's batch size needs. */
  async function readRange(topic, p, from, to, signal) {
    const records = [];
    let at = from;
    while (at < to) {
      const query = new URLSearchParams({ from: at, limit: to - at });
      const page = await api(`${partitionPath(topic, p)}/records?${query}`, { signal });
      for (const record of page.records) if (record.offset < to) records.push(record);
      if (page.nextOffset <= at) break;
      at = page.nextOffset;
    }
    return records;
  }

  async function deadLettersView({ main, signal }, dlt) {
    setTopicNav(null);
    const selectAll = h('input', {
      type: 'checkbox', id: 'select-all', 'aria-label': 'Select every letter shown',
    });
    const bulk = h('button', { type: 'button', id: 'redrive-selected', text: 'Redrive selected' });
    const older = h('button', { type: 'button', id: 'older', text: 'Load older letters' });
    const status = h('span', { class: 'muted', id: 'letters-status' });
    const columns = ['', '#partition', '#offset', 'source', 'appended', 'payload', '', 'result'];
    const { wrap, body } = table(columns, {
      table: { id: 'letters' }, body: { id: 'letter-rows' },
    });
    wrap.querySelector('th').replaceChildren(selectAll);
    heading(main, `Dead letters in ${dlt}`,
      h('p', {
        class: 'muted',
        text: 'Newest first. Redriving appends a letter again to its source partition, once: ' +
          'a second redrive of the same letter appends nothing.',
      }),
      h('div', { class: 'toolbar' }, bulk, status), wrap, h('div', { class: 'toolbar' }, older));

    const info = await api(topicPath(dlt), { signal });
    // Per partition, the lowest offset loaded so far: older pages are read below it.
    const parts = info.partitions
      .filter((p) => p.nextOffset > p.oldestOffset)
      .map((p) => ({ partition: p.partition, oldest: p.oldestOffset, low: p.nextOffset }));
    const letters = [];

    async function loadOlder() {
      older.disabled = true;
      const batch = [];
      const left = parts.filter((part) => part.low > part.oldest);
      await pool(left, MAX_PARALLEL, signal, async (part) => {
        const from = Math.max(part.oldest, part.low - LETTERS_PAGE);
        const records = await readRange(dlt, part.partition, from, part.low, signal);
        part.low = from;
        for (const record of records) batch.push({ partition: part.partition, record });
      });
      const newest = (a, b) => b.record.appendedAt - a.record.appendedAt
        || b.record.offset - a.record.offset;
      batch.sort(newest);
      for (const letter of batch) {
        letter.row = letterRow(letter);
        letters.push(letter);
        body.append(letter.row);
      }
      older.disabled = parts.every((part) => part.low <= part.oldest);
      const plural = letters.length === 1 ? '' : 's';
      status.textContent = `${number(letters.length)} letter${plural} shown`;
      if (!letters.length) body.replaceChildren(emptyRow(8, 'No dead letters.'));
    }

    function letterRow(letter) {
      const { partition, record } = letter;
      const source = letterSource(record.key);
      const payload = payloadText(record);
      letter.check = h('input', {
        type: 'checkbox', class: 'select',
        'aria-label': `Select letter ${partition}/${record.offset}`,
      });
      letter.button = h('button', {
        type: 'button', class: 'redrive', text: 'Redrive', onclick: () => redrive([letter]),
      });
      letter.result = h('td', { class: 'redrive-result', 'aria-live': 'polite' });
      return h('tr', { 'data-partition': partition, 'data-offset': record.offset, class: 'letter' },
        h('td', {}, letter.check),
        cell(String(partition), 'num'),
        cell(String(record.offset), 'num'),
        h('td', { class: 'source' }, source
          ? link(href('topics', source.topic, 'partitions', source.partition, 'tail'),
            `${source.topic}/${source.partition} @ ${source.offset}`)
          : `unknown (key ${record.key})`),
        cell(timestamp(record.appendedAt), 'time'),
        cutCell(payload, PAYLOAD_CHARS, 'payload'),
        h('td', {}, letter.button),
        letter.result);
    }

    /** Redrives `chosen`, one request per dead-letter partition and at most REDRIVE_MAX letters. */
    async function redrive(chosen) {
      const byPartition = new Map();
      for (const letter of chosen) {
        const list = byPartition.get(letter.partition) || [];
        list.push(letter);
        byPartition.set(letter.partition, list);
      }
      const batches = [];
      for (const [p, list] of byPartition) {
        for (let i = 0; i < list.length; i += REDRIVE_MAX) {
          batches.push([p, list.slice(i, i + REDRIVE_MAX)]);
        }
      }
      await pool(batches, MAX_PARALLEL, signal, async ([p, list]) => {
        for (const letter of list) {
          letter.button.disabled = true;
          letter.result.textContent = 'redriving…';
        }
        try {
          const answer = await api(`${partitionPath(dlt, p)}/redrive`, {
            method: 'POST', body: { offsets: list.map((letter) => letter.record.offset) }, signal,
          });
          answer.redriven.forEach((done, i) => {
            const where = `${done.topic}/${done.partition} @ ${done.appendedOffset}`;
            list[i].result.textContent = `redriven to ${where}`;
            list[i].result.className = 'redrive-result ok';
          });
        } catch (err) {
          if (isAbort(err)) return;
          list.forEach((letter) => {
            letter.result.textContent = `failed: ${err.message}`;
            letter.result.className = 'redrive-result failed';
          });
          report(err);
        } finally {
          list.forEach((letter) => { letter.button.disabled = false; });
        }
      });
    }

    bulk.addEventListener('click', async () => {
      const chosen = letters.filter((letter) => letter.check.checked);
      if (!chosen.length) {
        status.textContent = 'Select letters first.';
        return;
      }
      bulk.disabled = true;
      try {
        await redrive(chosen);
      } finally {
        bulk.disabled = false;
      }
    });
    selectAll.addEventListener('change', () => {
      for (const letter of letters) letter.check.checked = selectAll.checked;
    });
    older.addEventListener('click', () => loadOlder().catch(report));
    await loadOlder();
  }

  // ---------------------------------------------------------------------------------------
  // Cluster
  // ---------------------------------------------------------------------------------------

  /** Sums of each named series in Prometheus text, over all label sets. */
  function parseMetrics(text, names) {
    const sums = new Map();
    for (const line of text.split('\n')) {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)/.exec(line);
      if (!match || !names.includes(match[1])) continue;
      sums.set(match[1], (sums.get(match[1]) || 0) + Number(match[2]));
    }
    return sums;
  }

  async function clusterView({ main, signal }) {
    setTopicNav(null);
    heading(main, 'Cluster');
    const panel = h('section', { id: 'cluster-status' });
    const metrics = h('section', { id: 'cluster-metrics' });
    main.append(panel, metrics);
    let status = null;
    try {
      status = await api('cluster', { signal });
    } catch (err) {
      if (!(err instanceof ApiError && err.code === 'not_found')) throw err;
    }
    if (status) panel.append(...clusterPanel(status));
    else {
      panel.append(h('p', { id: 'single-node' },
        h('strong', { text: 'Single node. ' }),
        `The server at ${API_ROOT.host} is not in a cluster: it holds every partition itself.`));
    }
    try {
      const names = CLUSTER_METRICS.map(([name]) => name);
      const sums = parseMetrics(await api('metrics', { signal }), names);
      const shown = CLUSTER_METRICS.filter(([name]) => sums.has(name));
      metrics.append(h('h2', { text: 'The answering node, from /metrics' }), h('dl', { class: 'facts' },
        shown.map(([name, label]) => [
          h('dt', { text: label, title: name }),
          h('dd', { text: number(sums.get(name)) }),
        ])));
    } catch (err) {
      // A token without the metrics permission just does not see this panel.
      if (!(err instanceof ApiError && err.status === 403)) throw err;
    }
  }

  function clusterPanel(status) {
    const columns = ['member', 'url', 'kafka', '#incarnation', '#volumes', 'volume list'];
    const { wrap, body } = table(columns, { table: { id: 'members' } });
    for (const [name, member] of Object.entries(status.members)) {
      const volumes = member.volumes || [];
      body.append(h('tr', { 'data-member': name },
        cell(name + (name === status.node ? ' (answered)' : '')),
        cell(member.url),
        cell(member.kafka || '–'),
        cell(String(member.inc), 'num'),
        cell(number(volumes.length), 'num'),
        h('td', {}, h('details', {},
          h('summary', { text: 'show' }),
          h('span', { class: 'volumes', text: volumes.join(', ') || 'none' })))));
    }
    const list = (values) => (values && values.length ? values.join(', ') : 'none');
    return [
      h('dl', { class: 'facts' },
        h('dt', { text: 'answered by' }), h('dd', { text: status.node }),
        h('dt', { text: 'volumes' }), h('dd', { text: number(status.volumes) }),
        h('dt', { text: 'unowned' }), h('dd', { text: list(status.unowned) }),
        h('dt', { text: 'taking' }), h('dd', { text: list(status.taking) }),
        h('dt', { text: 'releasing' }), h('dd', { text: status.releasing ?? 'none' })),
      wrap,
    ];
  }

  // ---------------------------------------------------------------------------------------
  // Start
  // ---------------------------------------------------------------------------------------

  function onKey(event) {
    const typing = event.target.closest('input, textarea, select, [contenteditable]');
    if (event.key === '/' && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
      const box = document.querySelector('[data-slash]');
      if (box) {
        event.preventDefault();
        box.focus();
      }
    }
  }

  function start() {
    window.addEventListener('hashchange', () => {
      focusHeading = true;
      route();
    });
    document.addEventListener('keydown', onKey);
    document.getElementById('change-token').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      clearError();
      showTokenForm();
    });
    document.querySelector('.skip').addEventListener('click', (event) => {
      event.preventDefault();
      document.getElementById('view').focus();
    });
    route();
  }

  start();
})();
