CREATE TABLE hello_marks (id serial PRIMARY KEY, note text NOT NULL);
